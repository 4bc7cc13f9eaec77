"""fasdl.contract.user_code.ModelRef: the one parse of a workload's model (or loss) reference,
a registry name or the user's ``path/to/file.py:function``; every error names the field."""

from __future__ import annotations

import pytest

from fasdl.contract.fields import PlanError
from fasdl.contract.user_code import ModelRef
from fasdl.contract.workload import LOSSES, Workload


@pytest.mark.parametrize(("text", "code"), [
    ("cnn", None),
    ("mlp-resnet50-size", None),
    ("models/net.py:build", ("models/net.py", "build")),
    ("/abs/pkg/mod.py:make_net", ("/abs/pkg/mod.py", "make_net")),
])
def test_a_reference_parses_to_a_registry_name_or_code(
        text: str, code: tuple[str, str] | None) -> None:
    ref = ModelRef.parse(text, "workload.model")
    assert ref.code == code
    assert str(ref) == ref.name == text


@pytest.mark.parametrize(("value", "message"), [
    ("../net.py:build", "the file's path must not contain '..'"),
    ("a/../net.py:build", "the file's path must not contain '..'"),
    ("net.py:", "must be a model registry name"),
    ("net.py:1build", "must be a model registry name"),
    ("package.module:fn", "must be a model registry name"),  # a module path, not a file
    ("", "must be a model registry name"),
    (3, "must be a model registry name"),
    (None, "must be a model registry name"),
])
def test_a_bad_reference_names_the_field(value: object, message: str) -> None:
    with pytest.raises(PlanError, match=rf"^plan field 'workload\.model': {message}") as raised:
        ModelRef.parse(value, "workload.model")
    assert raised.value.field == "workload.model"


def test_a_loss_is_one_of_its_names_or_code() -> None:
    assert ModelRef.parse("mse", "workload.loss", names=LOSSES).code is None
    assert ModelRef.parse("l.py:make", "workload.loss", names=LOSSES).code == ("l.py", "make")
    with pytest.raises(PlanError, match=r"^plan field 'workload\.loss': must be one of "):
        ModelRef.parse("hinge", "workload.loss", names=LOSSES)


@pytest.mark.parametrize(("shape", "entries", "message"), [
    ([24], 1, None),  # one pair for every feature
    ([24], 24, None),  # one per feature: the importers' statistics of N x F rows
    ([24], 3, "must have 1 or 24 entries (one for all features or one per feature"),
    ([3, 8, 8], 3, None),
    ([3, 8, 8], 1, "must have 3 entries (one per channel of input_shape [3, 8, 8]), got 1"),
])
def test_normalization_has_one_pair_per_channel_or_feature(
        shape: list[int], entries: int, message: str | None) -> None:
    workload = Workload(name="mine", model="mlp", dataset="datasets/mine", samples=10,
                        dataset_mb=1.0, model_mb=1.0, input_shape=shape, classes=2,
                        normalization={"mean": [0.5] * entries, "std": [0.25] * entries})
    if message is None:
        workload.validate()
        return
    with pytest.raises(PlanError, match=r"workload\.normalization\.mean") as raised:
        workload.validate()
    assert message in str(raised.value)
