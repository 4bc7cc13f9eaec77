"""CIFAR augmentation: the crop, flip and normalisation it claims, a pure function of
(seed, worker, iteration)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fasdl.training.augment import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    CROP_PADDING,
    AugmentationError,
    check_rows,
    evaluation_tensors,
    to_tensors,
    training_tensors,
)

ROWS = np.random.default_rng(3).integers(0, 256, (16, 3, 6, 5), dtype=np.uint8)
LABELS = np.arange(16, dtype=np.int64)


def _normalise(pixels: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(CIFAR10_MEAN).view(3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(3, 1, 1)
    return (pixels - mean) / std


def test_each_sample_is_a_padded_crop_maybe_flipped_then_normalised() -> None:
    augmented, labels = training_tensors(ROWS, LABELS, "cifar", seed=5, worker=1, iteration=9)
    assert torch.equal(labels, torch.from_numpy(LABELS))
    plain, _ = to_tensors(ROWS, LABELS)
    pad = CROP_PADDING
    padded = torch.nn.functional.pad(plain, (pad, pad, pad, pad))
    flips = 0
    for sample in range(len(ROWS)):
        candidates = {(top, left, flip)
                      for top in range(2 * pad + 1) for left in range(2 * pad + 1)
                      for flip in (False, True)
                      if torch.allclose(augmented[sample], _normalise(
                          (lambda c: c.flip(-1) if flip else c)(
                              padded[sample, :, top:top + 6, left:left + 5])), atol=1e-6)}
        assert candidates, f"sample {sample} is no crop of its padded image"
        flips += all(flip for _, _, flip in candidates)
    assert 0 < flips < len(ROWS)  # about half are flipped


def test_draws_depend_on_seed_worker_and_iteration_only() -> None:
    def draw(seed: int, worker: int, iteration: int) -> torch.Tensor:
        return training_tensors(ROWS, LABELS, "cifar", seed=seed, worker=worker,
                                iteration=iteration)[0]

    assert torch.equal(draw(1, 2, 3), draw(1, 2, 3))
    for other in (draw(2, 2, 3), draw(1, 3, 3), draw(1, 2, 4)):
        assert not torch.equal(draw(1, 2, 3), other)


def test_evaluation_is_normalised_and_never_augmented() -> None:
    plain, _ = to_tensors(ROWS, LABELS)
    evaluated, _ = evaluation_tensors(ROWS, LABELS, "cifar")
    torch.testing.assert_close(evaluated, _normalise(plain))
    assert torch.equal(evaluation_tensors(ROWS, LABELS, "none")[0], plain)
    assert torch.equal(training_tensors(ROWS, LABELS, "none", seed=0, worker=0,
                                        iteration=0)[0], plain)


@pytest.mark.parametrize(("shape", "dtype"), [((1, 8, 8), "uint8"), ((2, 16), "<i4")])
def test_cifar_augmentation_needs_three_channel_images(shape: tuple[int, ...],
                                                       dtype: str) -> None:
    with pytest.raises(AugmentationError, match=r"training\.augmentation 'cifar' needs 3 x H x W"):
        check_rows("cifar", shape, np.dtype(dtype))
    check_rows("none", shape, np.dtype(dtype))
    check_rows("cifar", (3, 32, 32), np.dtype("uint8"))
