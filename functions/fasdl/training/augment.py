"""Model inputs for training and evaluation, with the plan's augmentation.

``none``: rows as fasdl.training.data.to_tensors gives them. ``cifar``: the usual CIFAR recipe on
C×H×W images scaled to [0, 1]: training batches get a random crop with 4 pixels of zero
padding and a horizontal flip with probability ½; every batch, training and evaluation, is
then normalised per channel with CIFAR-10's training-set mean and standard deviation (the
constants torchvision examples use). The random choices are a pure function of (seed,
worker, global iteration), so a resumed segment draws exactly what the undisturbed run drew.
"""

from __future__ import annotations

import numpy as np
import torch

from fasdl.training.data import to_tensors

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CROP_PADDING = 4
_STREAM = 0xA6  # keeps augmentation draws apart from other seeded streams


class AugmentationError(ValueError):
    """The plan's augmentation does not fit the dataset's rows."""


def check_rows(augmentation: str, row_shape: tuple[int, ...], dtype: np.dtype) -> None:
    """``cifar`` needs 3-channel images (the normalisation has three channels)."""
    if augmentation == "cifar" and (len(row_shape) != 3 or row_shape[0] != 3
                                    or dtype == np.dtype("<i4")):
        raise AugmentationError(f"training.augmentation 'cifar' needs 3 x H x W image rows, "
                                f"the dataset has {dtype} rows of {row_shape}")


def _normalised(features: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(CIFAR10_MEAN, dtype=features.dtype).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD, dtype=features.dtype).view(1, 3, 1, 1)
    return (features - mean) / std


def _crop_and_flip(features: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    count, _, height, width = features.shape
    pad = CROP_PADDING
    padded = torch.nn.functional.pad(features, (pad, pad, pad, pad))
    top = torch.from_numpy(rng.integers(0, 2 * pad + 1, count))
    left = torch.from_numpy(rng.integers(0, 2 * pad + 1, count))
    flip = torch.from_numpy(rng.random(count) < 0.5)
    rows = top[:, None] + torch.arange(height)[None, :]  # N×H
    cols = left[:, None] + torch.arange(width)[None, :]  # N×W
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    samples = torch.arange(count)[:, None, None]
    # advanced indexing picks N×H×W pixels of every channel: N×H×W×C, back to N×C×H×W
    cropped = padded.permute(0, 2, 3, 1)[samples, rows[:, :, None], cols[:, None, :]]
    return cropped.permute(0, 3, 1, 2).contiguous()


def training_tensors(x: np.ndarray, y: np.ndarray, augmentation: str, *, seed: int,
                     worker: int, iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One training batch of ``worker`` at global ``iteration``, augmented."""
    features, labels = to_tensors(x, y)
    if augmentation == "cifar":
        rng = np.random.default_rng([seed, worker, iteration, _STREAM])
        features = _normalised(_crop_and_flip(features, rng))
    return features, labels


def evaluation_tensors(x: np.ndarray, y: np.ndarray, augmentation: str
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Held-out rows as the trained model expects them (normalised, never augmented)."""
    features, labels = to_tensors(x, y)
    if augmentation == "cifar":
        features = _normalised(features)
    return features, labels
