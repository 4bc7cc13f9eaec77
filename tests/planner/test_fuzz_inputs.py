"""Property-based fuzzing of the plan -> synth and planner doors (issue 15), small and
derandomized here; ``make bench`` runs bench/fuzz_inputs.py with a larger budget."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz_inputs import door_cases

# Strategies need their folder when the module loads; removed when the session ends.
_TEMPORARY = tempfile.TemporaryDirectory(prefix="fasdl-fuzz-")
DOORS = door_cases(Path(_TEMPORARY.name))
BUDGET = {"plan": 120, "workload": 40, "platform": 30, "flags": 40}


def _fuzz_test(door: str) -> Callable[[], None]:
    strategy, check = DOORS[door]

    @settings(max_examples=BUDGET[door], derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategy)
    def run(value: Any) -> None:
        check(value)  # raises on a clean-error-or-valid violation; hypothesis shrinks it

    return run


@pytest.mark.parametrize("door", sorted(BUDGET))
def test_door_gives_a_clean_error_or_a_valid_result(door: str) -> None:
    _fuzz_test(door)()


def test_the_doors_are_the_bench_doors() -> None:
    assert set(BUDGET) == set(DOORS)
    assert isinstance(DOORS["plan"][0], st.SearchStrategy)
