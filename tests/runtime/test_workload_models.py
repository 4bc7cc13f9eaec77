"""The planner's shipped workloads name models the runtime can build, with matching sizes."""

from __future__ import annotations

import pytest

from fasdl.training.networks import MODELS, parameter_mb
from planner.model.inputs.profiles import known_workloads, load_workload

# Planned from the paper's coefficients only, with no runtime model (none at the moment:
# bert-base-cola's bert-base is fasdl.training.text_networks').
PLANNING_ONLY: set[str] = set()


@pytest.mark.parametrize("name", sorted(set(known_workloads()) - PLANNING_ONLY))
def test_workload_model_is_in_the_runtime_registry(name: str) -> None:
    workload = load_workload(name)
    assert workload.model in MODELS, f"{name}: model {workload.model!r} not in {sorted(MODELS)}"


@pytest.mark.parametrize(("name", "num_classes"), [
    ("resnet50-cifar10", 1000), ("mobilenet-cifar10", 1000), ("squeezenet-cifar10", 1000)])
def test_paper_model_sizes_match_the_runtime_models(name: str, num_classes: int) -> None:
    """Table II sizes are the 1000-class ImageNet heads; ours match them within 1 %."""
    workload = load_workload(name)
    size = parameter_mb(workload.model, num_classes=num_classes)
    assert size == pytest.approx(workload.model_mb, rel=0.01)


def test_planning_only_workloads_are_really_missing() -> None:
    for name in PLANNING_ONLY:
        assert load_workload(name).model not in MODELS


@pytest.mark.parametrize("name", ["cnn-digits", "mlp-digits"])
def test_digits_workload_sizes_are_the_registry_models_on_digits(name: str) -> None:
    workload = load_workload(name)
    size = parameter_mb(workload.model, num_classes=10, input_shape=(1, 8, 8))
    assert size == pytest.approx(workload.model_mb, rel=1e-4)


def test_bert_base_cola_is_bert_base_uncased_with_a_two_way_head() -> None:
    """FasDL's 417.17 MiB; BERT-Base-uncased with a 2-way head is 417.65 (0.12 % more)."""
    workload = load_workload("bert-base-cola")
    size = parameter_mb(workload.model, num_classes=2, input_shape=(2, 128))
    assert size == pytest.approx(workload.model_mb, rel=0.005)


def test_bert_mini_textset_size_is_the_registry_model() -> None:
    workload = load_workload("bert-mini-textset")
    size = parameter_mb(workload.model, num_classes=2, input_shape=(2, 16))
    assert size == pytest.approx(workload.model_mb, rel=1e-6)
