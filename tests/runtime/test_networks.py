"""Model registry: shapes, no batch norm where equivalence needs it, paper-sized families."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from fasdl.training.networks import (
    MODELS,
    PAPER_MODEL_MB,
    PAPER_NUM_CLASSES,
    build_model,
    build_seeded_model,
    parameter_count,
    parameter_mb,
)
from fasdl.training.text_networks import TEXT_MODELS

# The paper's Table 5.1 sizes are the ImageNet-headed networks in MiB; our CIFAR-stem bodies
# with the same 1000-way head must land within this relative tolerance.
PAPER_SIZE_TOLERANCE = 0.01


@pytest.fixture(autouse=True)
def _single_thread_torch() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny batches: thread start-up costs more than it saves
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", sorted(PAPER_MODEL_MB))
def test_paper_families_match_the_papers_model_size(name: str) -> None:
    size = parameter_mb(name, PAPER_NUM_CLASSES)
    assert size == pytest.approx(PAPER_MODEL_MB[name], rel=PAPER_SIZE_TOLERANCE)


# torchvision's counts for resnet50, mobilenet_v2 and squeezenet1_1 with 1000 classes
TORCHVISION_COUNTS = {"resnet50": 25_557_032, "mobilenet": 3_504_872, "squeezenet": 1_235_496}


@pytest.mark.parametrize("name", sorted(TORCHVISION_COUNTS))
def test_paper_families_have_torchvisions_exact_parameter_count(name: str) -> None:
    assert parameter_count(name, PAPER_NUM_CLASSES) == TORCHVISION_COUNTS[name]


@pytest.mark.parametrize("name", ["resnet50", "squeezenet"])
@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32)])
def test_size_matched_mlps_carry_the_paper_models_size(name: str,
                                                       shape: tuple[int, int, int]) -> None:
    stand_in = f"mlp-{name}-size"
    assert parameter_mb(stand_in, 10, shape) == pytest.approx(PAPER_MODEL_MB[name], rel=0.005)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                   for m in build_model(stand_in, 10, shape).modules())


def test_cifar10_heads_are_smaller_by_exactly_the_classifier() -> None:
    # torchvision's resnet50 (25,557,032) with a 10-way head; the CIFAR-stem variant has 23,520,842
    assert parameter_count("resnet50", 10) == 25_557_032 - 990 * 2049
    assert parameter_count("resnet18", 10) == 11_173_962
    # only the last layer depends on the number of classes
    assert parameter_count("resnet50", 1000) - parameter_count("resnet50", 10) == 990 * 2049
    assert parameter_count("squeezenet", 1000) - parameter_count("squeezenet", 10) == 990 * 513


# resnet50 runs once (CIFAR shape): building it alone costs seconds
# (text models take (2, L) token rows: tests/runtime/test_text_networks.py)
SHAPE_CASES = [(name, shape) for name in sorted(set(MODELS) - TEXT_MODELS)
               for shape in [(3, 32, 32), (1, 8, 8)]
               if not (name == "resnet50" and shape[0] == 1)
               and not (name == "mlp-resnet50-size" and shape[0] == 3)]


@pytest.mark.parametrize(("name", "shape"), SHAPE_CASES,
                         ids=[f"{name}-{'x'.join(map(str, shape))}" for name, shape in SHAPE_CASES])
def test_forward_shapes(name: str, shape: tuple[int, int, int]) -> None:
    torch.manual_seed(0)
    model = build_model(name, 10, shape)
    model.eval()
    with torch.no_grad():
        out = model(torch.rand(2, *shape))
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    assert sum(p.numel() for p in model.parameters()) == parameter_count(name, 10, shape)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_equivalence_models_have_no_batch_norm(name: str) -> None:
    model = build_model(name, 10, (3, 32, 32))
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert not list(model.buffers())


def test_same_seed_same_weights_and_errors() -> None:
    torch.manual_seed(3)
    first = build_model("cnn")
    torch.manual_seed(3)
    second = build_model("cnn")
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    state = torch.get_rng_state()
    replicas = [build_seeded_model("mlp", 11, 10, (1, 8, 8)) for _ in range(2)]
    assert torch.equal(torch.get_rng_state(), state)  # the global stream is untouched
    for a, b in zip(replicas[0].parameters(), replicas[1].parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="unknown model"):
        build_model("vgg")
    with pytest.raises(ValueError, match="num_classes"):
        build_model("mlp", 1)
