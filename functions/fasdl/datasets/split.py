"""Labels and the seeded train/test split the importers share.

Labels are integers 0..n-1 with every class present (:func:`check_labels`). The split is a
seeded, per-class stratified shuffle: each class gives ``round(count · test_fraction)`` of its
rows (at most all but one, so every class stays in the training split) to the test split,
and both splits are shuffled; the same labels, fraction and seed always give the same split.
"""

from __future__ import annotations

import numpy as np

from fasdl.contract.errors import DatasetError

DEFAULT_TEST_FRACTION = 0.2
MAX_CLASSES = 100_000  # fasdl.contract.workload's limit on workload.classes


def check_test_fraction(test_fraction: float) -> None:
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")


def check_labels(source: str, y: np.ndarray) -> int:
    """The class count n of integer labels ``y`` that must be 0..n-1, every class present
    and n in [2, 100000]; a DatasetError naming ``source`` otherwise."""
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DatasetError(f"{source}: labels must be a 1-D integer array, got {y.dtype} "
                           f"of shape {y.shape}")
    if len(y) == 0:
        raise DatasetError(f"{source}: no labels")
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= MAX_CLASSES:
        raise DatasetError(f"{source}: labels must be in [0, {MAX_CLASSES - 1}], got "
                           f"{low}..{high}")
    present = np.bincount(y.astype(np.int64), minlength=high + 1) > 0
    if high < 1:
        raise DatasetError(f"{source}: labels must be 0..n-1 with n >= 2 classes, got only "
                           f"label {high}")
    if not present.all():
        missing = int(np.flatnonzero(~present)[0])
        raise DatasetError(f"{source}: labels must be 0..n-1 with every class present; "
                           f"label {missing} never occurs (labels run {low}..{high})")
    return high + 1


def stratified_split(y: np.ndarray, test_fraction: float, seed: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, test rows) of ``y``: each class's share of the test split drawn with
    ``seed``, both splits shuffled. A split without test rows is refused."""
    check_test_fraction(test_fraction)
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be in [0, 2**63), got {seed}")
    rng = np.random.default_rng(seed)
    test_rows: list[np.ndarray] = []
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        test_rows.append(members[:min(round(len(members) * test_fraction), len(members) - 1)])
    is_test = np.zeros(len(y), dtype=bool)
    is_test[np.concatenate(test_rows)] = True
    if not is_test.any():
        raise DatasetError(f"test_fraction {test_fraction} leaves no test rows of {len(y)} "
                           f"(each class gives round(its rows x test_fraction)); use more "
                           f"data or a larger --test-fraction")
    train_order = rng.permutation(np.flatnonzero(~is_test))
    test_order = rng.permutation(np.flatnonzero(is_test))
    return train_order, test_order
