"""The ``images`` and ``normalize`` augmentations normalise with the dataset's own statistics
(workload.normalization): checked against a hand computation; ``images`` crops and flips
exactly as ``cifar`` does; rows that do not fit the statistics are refused; the evaluation
helpers carry the same keyword."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fasdl.contract.plan import Workload
from fasdl.training.augment import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    AugmentationError,
    Normalization,
    check_rows,
    evaluation_tensors,
    normalization_from,
    normalization_of,
    to_tensors,
    training_tensors,
)
from fasdl.training.evaluation import confusion_of, correct_predictions

ROWS = np.random.default_rng(3).integers(0, 256, (16, 3, 6, 5), dtype=np.uint8)
LABELS = np.arange(16, dtype=np.int64) % 4
STATS = Normalization((0.2, 0.5, 0.7), (0.1, 0.25, 0.4))
DRAW = {"seed": 5, "worker": 1, "iteration": 9}


def _by_hand(rows: np.ndarray, stats: Normalization) -> np.ndarray:
    """(value / 255 − mean[c]) / std[c] in float64, channel c on axis 1."""
    values = rows.astype(np.float64) / (255.0 if rows.dtype == np.uint8 else 1.0)
    shape = (1, len(stats.mean), *(1,) * (rows.ndim - 2))
    return (values - np.reshape(stats.mean, shape)) / np.reshape(stats.std, shape)


def test_normalize_is_the_dataset_statistics_only() -> None:
    expected = _by_hand(ROWS, STATS)
    evaluated, labels = evaluation_tensors(ROWS, LABELS, "normalize", normalization=STATS)
    np.testing.assert_allclose(evaluated.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(labels, torch.from_numpy(LABELS))
    trained = training_tensors(ROWS, LABELS, "normalize", **DRAW, normalization=STATS)[0]
    assert torch.equal(trained, evaluated)  # no crop, no flip


@pytest.mark.parametrize("stats", [Normalization((1.5,), (2.0,)),
                                   Normalization((0.0, 1.0, 2.0, 3.0), (1.0, 2.0, 4.0, 8.0))])
def test_normalize_on_feature_rows(stats: Normalization) -> None:
    """N×F rows: one mean and std for every feature (the importer's), or one per feature."""
    rows = np.random.default_rng(1).normal(size=(7, 4)).astype(np.float32)
    check_rows("normalize", (4,), rows.dtype, stats)
    got = training_tensors(rows, LABELS[:7], "normalize", **DRAW, normalization=stats)[0]
    np.testing.assert_allclose(got.numpy(), _by_hand(rows, stats), rtol=1e-5, atol=1e-6)


def test_images_crops_and_flips_like_cifar_then_uses_the_dataset_statistics() -> None:
    images = training_tensors(ROWS, LABELS, "images", **DRAW, normalization=STATS)[0]
    cifar = training_tensors(ROWS, LABELS, "cifar", **DRAW)[0]
    # undo each normalisation: the same cropped and flipped pixels underneath
    view = (1, 3, 1, 1)
    pixels = images * torch.tensor(STATS.std).view(view) + torch.tensor(STATS.mean).view(view)
    same = cifar * torch.tensor(CIFAR10_STD).view(view) + torch.tensor(CIFAR10_MEAN).view(view)
    torch.testing.assert_close(pixels, same, rtol=0, atol=1e-5)
    assert not torch.allclose(pixels, to_tensors(ROWS, LABELS)[0], atol=1e-3)  # augmented
    evaluated = evaluation_tensors(ROWS, LABELS, "images", normalization=STATS)[0]
    np.testing.assert_allclose(evaluated.numpy(), _by_hand(ROWS, STATS), rtol=1e-5, atol=1e-5)


def test_cifar_keeps_its_constants_bit_for_bit() -> None:
    plain = to_tensors(ROWS, LABELS)[0]
    old = ((plain - torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1))
           / torch.tensor(CIFAR10_STD).view(1, 3, 1, 1))  # the formula before normalization
    assert torch.equal(evaluation_tensors(ROWS, LABELS, "cifar")[0], old)
    assert torch.equal(evaluation_tensors(ROWS, LABELS, "cifar", normalization=STATS)[0], old)


@pytest.mark.parametrize(("augmentation", "shape", "dtype", "stats", "words"), [
    ("normalize", (1, 8, 8), "uint8", STATS,
     "'normalize': workload.normalization has 3 channels, the rows need 1 on axis 1"),
    ("images", (3, 8, 8), "uint8", Normalization((0.5,), (0.2,)),
     "'images': workload.normalization has 1 channels, the rows need 3 on axis 1"),
    ("normalize", (5,), "<f4", STATS, "or one mean and std for N x F rows"),
    ("images", (12,), "<f4", Normalization((0.5,), (0.2,)),
     "'images' needs C x H x W image rows"),
    ("normalize", (2, 16), "<i4", Normalization((0.5, 0.5), (1.0, 1.0)),
     "needs uint8/float32 rows (images or features)"),
    ("images", (3, 8, 8), "uint8", None, "needs workload.normalization"),
])
def test_rows_that_do_not_fit_the_statistics_are_refused(
        augmentation: str, shape: tuple[int, ...], dtype: str, stats: Normalization | None,
        words: str) -> None:
    with pytest.raises(AugmentationError) as raised:
        check_rows(augmentation, shape, np.dtype(dtype), stats)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_fitting_rows_pass_and_missing_statistics_never_pass_silently() -> None:
    check_rows("images", (3, 32, 32), np.dtype("uint8"), STATS)
    check_rows("normalize", (3, 4), np.dtype("<f4"), STATS)  # any shape, 3 channels on axis 1
    check_rows("none", (2, 16), np.dtype("<i4"))
    for augmentation in ("images", "normalize"):
        with pytest.raises(AugmentationError, match=r"needs workload\.normalization"):
            training_tensors(ROWS, LABELS, augmentation, **DRAW)
        with pytest.raises(AugmentationError, match=r"needs workload\.normalization"):
            evaluation_tensors(ROWS, LABELS, augmentation)


def test_the_statistics_come_from_the_workload() -> None:
    workload = Workload(name="w", model="cnn", dataset="datasets/w", samples=10,
                        dataset_mb=1.0, model_mb=1.0)
    assert normalization_of(workload) is None
    given = Workload(name="w", model="cnn", dataset="datasets/w", samples=10, dataset_mb=1.0,
                     model_mb=1.0, normalization={"mean": [0.2, 0.5, 0.7],
                                                  "std": [0.1, 0.25, 0.4]})
    assert normalization_of(given) == STATS and normalization_from(None) is None


def test_evaluation_helpers_take_the_statistics() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(90, 4))
    with torch.no_grad():
        expected = model(torch.from_numpy(_by_hand(ROWS, STATS)).float()).argmax(1).numpy()
    confusion = confusion_of(model, ROWS, LABELS, 4, augmentation="normalize", batch=5,
                             normalization=STATS)
    assert confusion.correct == int((expected == LABELS).sum())
    binary = nn.Sequential(nn.Flatten(), nn.Linear(90, 2))
    with torch.no_grad():
        guesses = binary(torch.from_numpy(_by_hand(ROWS, STATS)).float()).argmax(1).numpy()
    assert correct_predictions(binary, ROWS, LABELS % 2, augmentation="normalize",
                               normalization=STATS) == int((guesses == LABELS % 2).sum())
