"""The one definition of 'an integer' and 'a number' every input check uses."""

from __future__ import annotations

import numpy as np
import pytest

from fasdl.contract.fields import (
    is_int,
    is_int_at_least,
    is_int_in,
    is_integral,
    is_number,
    is_real,
)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 1.0, "1", None, [1]])
def test_bools_floats_and_text_are_never_integers(value: object) -> None:
    assert not is_int(value) and not is_integral(value)


def test_numpy_integers_and_reals_only_where_asked() -> None:
    assert is_int(3) and is_integral(3) and is_integral(np.int64(3))
    assert not is_int(np.int64(3))  # JSON and argparse never produce one
    assert is_number(2.5) and is_number(2) and not is_number(True) and not is_number("2")
    assert is_real(np.float32(2.5)) and not is_number(np.float32(2.5)) and not is_real(False)


def test_ranges() -> None:
    assert is_int_in(5, 1, 5) and not is_int_in(6, 1, 5) and not is_int_in(True, 0, 5)
    assert is_int_at_least(0, 0) and not is_int_at_least(-1, 0)


def test_plan_profile_and_problem_errors_share_one_type_naming_the_field() -> None:
    from fasdl.contract.fields import FieldError
    from fasdl.contract.plan import PlanError
    from planner.model.inputs.problem import ModelInputError
    from planner.model.inputs.profiles import ProfileError

    for error in (PlanError("training.epochs", "must be >= 1"),
                  ModelInputError("epochs", "must be >= 1"),
                  ProfileError("field 'epochs': must be >= 1", "epochs", "must be >= 1")):
        assert isinstance(error, FieldError)
        assert error.field is not None and error.field.endswith("epochs")
        assert error.detail == "must be >= 1" and error.field in str(error)
