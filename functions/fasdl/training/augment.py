"""Model inputs for training and evaluation, with the plan's augmentation.

``none``: rows as :func:`to_tensors` gives them. ``cifar``: the usual CIFAR recipe on
C×H×W images scaled to [0, 1]: training batches get a random crop with 4 pixels of zero
padding and a horizontal flip with probability ½; every batch, training and evaluation, is
then normalised per channel with CIFAR-10's training-set mean and standard deviation (the
constants torchvision examples use). ``images``: the same crop and flip, then normalised with
the dataset's own statistics (``workload.normalization``, from the importer's meta.json:
:class:`Normalization`). ``normalize``: those statistics only, no crop or flip, for rows of
any shape with one mean and std per channel on axis 1, or N×F rows with one mean and std
for all features. The random choices are a pure function of (seed, worker, global
iteration), so a resumed segment draws exactly what the undisturbed run drew.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from fasdl.contract.workload import NEEDS_NORMALIZATION, Workload
from fasdl.training.data import TEXT_DTYPE

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CROP_PADDING = 4
CROPPING = ("cifar", "images")  # the augmentations that crop and flip training batches
_STREAM = 0xA6  # keeps augmentation draws apart from other seeded streams


def to_tensors(x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Model inputs: uint8 pixels scaled to [0, 1] float32, int32 token ids and masks as
    int64 (embedding indices, never scaled), labels as int64."""
    features = torch.from_numpy(np.ascontiguousarray(x))
    if features.dtype == torch.uint8:
        features = features.to(torch.float32).div_(255.0)
    elif features.dtype == torch.int32:
        features = features.to(torch.int64)
    return features, torch.from_numpy(np.ascontiguousarray(y))


class AugmentationError(ValueError):
    """The plan's augmentation does not fit the dataset's rows."""


class Normalization(NamedTuple):
    """A dataset's per-channel ``mean`` and ``std`` as the workers scale its rows (uint8 /
    255): channel c (axis 1) becomes (value − mean[c]) / std[c]; one value each for N×F
    rows normalises every feature alike."""

    mean: tuple[float, ...]
    std: tuple[float, ...]


CIFAR10 = Normalization(CIFAR10_MEAN, CIFAR10_STD)


def normalization_from(statistics: Mapping[str, Any] | None) -> Normalization | None:
    """``{"mean": [...], "std": [...]}`` (workload.normalization, meta.json, model.json) as a
    :class:`Normalization`; None stays None."""
    if statistics is None:
        return None
    return Normalization(tuple(float(value) for value in statistics["mean"]),
                         tuple(float(value) for value in statistics["std"]))


def normalization_of(workload: Workload) -> Normalization | None:
    """The plan's ``workload.normalization`` (None when it has none)."""
    return normalization_from(workload.normalization)


def check_rows(augmentation: str, row_shape: tuple[int, ...], dtype: np.dtype,
               normalization: Normalization | None = None) -> None:
    """``cifar`` needs 3-channel images (the normalisation has three channels); ``images``
    C×H×W images and ``normalize`` uint8/float32 rows, both with C = len(mean) channels on
    axis 1 (``normalize``: N×F rows have one per feature, or one for all)."""
    if augmentation == "cifar" and (len(row_shape) != 3 or row_shape[0] != 3
                                    or dtype == TEXT_DTYPE):
        raise AugmentationError(f"training.augmentation 'cifar' needs 3 x H x W image rows, "
                                f"the dataset has {dtype} rows of {row_shape}")
    if augmentation in NEEDS_NORMALIZATION:
        _check_normalized(augmentation, row_shape, dtype, normalization)


def _check_normalized(augmentation: str, row_shape: tuple[int, ...], dtype: np.dtype,
                      normalization: Normalization | None) -> None:
    rows = f"the dataset has {dtype} rows of {row_shape}"
    if dtype == TEXT_DTYPE or not row_shape:
        raise AugmentationError(f"training.augmentation {augmentation!r} needs uint8/float32 "
                                f"rows (images or features), {rows}")
    if augmentation == "images" and len(row_shape) != 3:
        raise AugmentationError(f"training.augmentation 'images' needs C x H x W image rows, "
                                f"{rows}")
    if normalization is None:
        raise AugmentationError(f"training.augmentation {augmentation!r} needs "
                                f"workload.normalization (the dataset's meta.json has it)")
    mean, std = normalization
    if len(std) != len(mean) or not mean:
        raise AugmentationError(f"workload.normalization needs as many std as mean values "
                                f"(at least one), got {len(mean)} and {len(std)}")
    if len(mean) != row_shape[0] and not (len(mean) == 1 and len(row_shape) == 1):
        raise AugmentationError(
            f"training.augmentation {augmentation!r}: workload.normalization has "
            f"{len(mean)} channels, the rows need {row_shape[0]} on axis 1"
            f"{' (or one mean and std for N x F rows)' if len(row_shape) == 1 else ''}, "
            f"{rows}")


def _statistics(augmentation: str, normalization: Normalization | None
                ) -> Normalization | None:
    """What ``augmentation`` normalises with (None: it does not normalise)."""
    if augmentation == "cifar":
        return CIFAR10
    if augmentation not in NEEDS_NORMALIZATION:
        return None
    if normalization is None:
        raise AugmentationError(f"training.augmentation {augmentation!r} needs "
                                f"workload.normalization, got none")
    return normalization


def _normalised(features: torch.Tensor, statistics: Normalization) -> torch.Tensor:
    """Per channel on axis 1 (one mean and std: every value alike)."""
    mean, std = statistics
    shape = (1, len(mean), *(1,) * (features.dim() - 2))
    return ((features - torch.tensor(mean, dtype=features.dtype).view(shape))
            / torch.tensor(std, dtype=features.dtype).view(shape))


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
                     worker: int, iteration: int, normalization: Normalization | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """One training batch of ``worker`` at global ``iteration``, augmented (``images`` and
    ``normalize`` with ``normalization``, the dataset's statistics)."""
    features, labels = to_tensors(x, y)
    statistics = _statistics(augmentation, normalization)
    if augmentation in CROPPING:
        rng = np.random.default_rng([seed, worker, iteration, _STREAM])
        features = _crop_and_flip(features, rng)
    if statistics is not None:
        features = _normalised(features, statistics)
    return features, labels


def evaluation_tensors(x: np.ndarray, y: np.ndarray, augmentation: str, *,
                       normalization: Normalization | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Held-out rows as the trained model expects them (normalised, never augmented)."""
    features, labels = to_tensors(x, y)
    statistics = _statistics(augmentation, normalization)
    if statistics is not None:
        features = _normalised(features, statistics)
    return features, labels
