"""Held-out metrics from predicted classes: accuracy and Matthews correlation (MCC).

MCC is CoLA's official metric (GLUE): on an unbalanced binary set a model that always
answers "acceptable" has a high accuracy and an MCC of 0. It is reported for two-class
workloads only (``mcc`` stays None otherwise), with scikit-learn's convention that a
prediction or a truth of a single class (a zero denominator) scores 0.
"""

from __future__ import annotations

import math

import numpy as np


class Confusion:
    """Counts of (true class, predicted class), accumulated batch by batch."""

    def __init__(self, classes: int) -> None:
        self.classes = classes
        self.counts = np.zeros((classes, classes), dtype=np.int64)

    def add(self, labels: np.ndarray, predictions: np.ndarray) -> None:
        labels = np.asarray(labels, dtype=np.int64)
        predictions = np.asarray(predictions, dtype=np.int64)
        if labels.size == 0:
            return
        # a test label the training split never had widens the table: no crash at the end
        # of a run; such a split simply has no binary MCC
        size = max(len(self.counts), int(labels.max()) + 1, int(predictions.max()) + 1)
        if size > len(self.counts):
            grown = np.zeros((size, size), dtype=np.int64)
            grown[:len(self.counts), :len(self.counts)] = self.counts
            self.counts = grown
        np.add.at(self.counts, (labels, predictions), 1)

    @property
    def samples(self) -> int:
        return int(self.counts.sum())

    @property
    def correct(self) -> int:
        return int(np.trace(self.counts))

    def accuracy(self) -> float:
        return self.correct / max(1, self.samples)

    def mcc(self) -> float | None:
        """Matthews correlation of a two-class table; None for any other."""
        if self.classes != 2 or self.counts.shape != (2, 2):
            return None
        (tn, fp), (fn, tp) = (int(n) for n in self.counts[0]), (int(n) for n in self.counts[1])
        denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)  # exact: Python ints
        if denominator == 0:
            return 0.0
        return (tp * tn - fp * fn) / math.sqrt(denominator)
