"""A model's predictions counted on rows, batch by batch, with the inputs prepared exactly as
the workers prepare them (fasdl.training.augment.evaluation_tensors: the augmentation's
normalisation, with ``normalization``, the dataset's statistics, for ``images`` and
``normalize``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fasdl.training.augment import Normalization, evaluation_tensors
from fasdl.training.classification import Confusion
from fasdl.training.export import MAX_EVAL_BATCH

Progress = Callable[[int, int], None]


def add_batch(confusion: Confusion, model: torch.nn.Module, x: np.ndarray, y: np.ndarray,
              augmentation: str, *, normalization: Normalization | None = None) -> None:
    """Count what ``model`` (in eval mode) predicts for one batch of rows."""
    with torch.no_grad():
        features, labels = evaluation_tensors(x, y, augmentation, normalization=normalization)
        confusion.add(labels.numpy(), model(features).argmax(1).numpy())


def confusion_of(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, classes: int,
                 progress: Progress | None = None, *, augmentation: str = "none",
                 batch: int = MAX_EVAL_BATCH, normalization: Normalization | None = None
                 ) -> Confusion:
    """(true, predicted) counts of ``model`` (in eval mode) on the rows, batch by batch."""
    model.eval()
    confusion = Confusion(classes)
    for start in range(0, len(y), batch):
        add_batch(confusion, model, x[start:start + batch], y[start:start + batch],
                  augmentation, normalization=normalization)
        if progress is not None:
            progress(min(start + batch, len(y)), len(y))
    return confusion


def correct_predictions(model: torch.nn.Module, x: np.ndarray, y: np.ndarray,
                        progress: Progress | None = None, *, augmentation: str = "none",
                        normalization: Normalization | None = None) -> int:
    """How many rows ``model`` (in eval mode) classifies right, batch by batch."""
    return confusion_of(model, x, y, 2, progress, augmentation=augmentation,
                        normalization=normalization).correct
