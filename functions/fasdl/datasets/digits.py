"""The shipped small real dataset: scikit-learn's digits (1797 8×8 images, bundled, offline).

Pixels 0..16 are scaled to 0..255 uint8 (N×1×8×8) so the runtime treats them like any image
dataset; the train/test split is a seeded, per-class stratified shuffle.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fasdl.datasets.output import staged_output
from fasdl.training.data import write_dataset


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """All 1797 digits as (x uint8 N×1×8×8, y int64 N). Needs scikit-learn (build time only)."""
    from sklearn.datasets import load_digits  # imported here: not available inside Lambda

    bunch = load_digits()
    pixels = np.asarray(bunch.images, dtype=np.float64)
    x = np.rint(pixels * (255.0 / 16.0)).astype(np.uint8).reshape(-1, 1, 8, 8)
    return x, np.asarray(bunch.target, dtype=np.int64)


def build_digits(out_dir: str | Path, *, test_fraction: float = 0.2,
                 seed: int = 0, force: bool = False) -> dict[str, int]:
    """Write ``{out_dir}/train`` and ``{out_dir}/test``, both or neither
    (fasdl.datasets.output); returns rows per split."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    x, y = digits_arrays()
    rng = np.random.default_rng(seed)
    test_rows: list[np.ndarray] = []
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        test_rows.append(members[:round(len(members) * test_fraction)])
    is_test = np.zeros(len(y), dtype=bool)
    is_test[np.concatenate(test_rows)] = True
    train_order = rng.permutation(np.flatnonzero(~is_test))
    test_order = rng.permutation(np.flatnonzero(is_test))
    with staged_output(out_dir, force=force) as staging:
        write_dataset(staging / "train", x[train_order], y[train_order])
        write_dataset(staging / "test", x[test_order], y[test_order])
    return {"train": len(train_order), "test": len(test_order)}
