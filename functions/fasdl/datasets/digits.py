"""The shipped small real dataset: scikit-learn's digits (1797 8×8 images, bundled, offline).

Pixels 0..16 are scaled to 0..255 uint8 (N×1×8×8) so the runtime treats them like any image
dataset; the train/test split is a seeded, per-class stratified shuffle
(fasdl.datasets.split); ``train/meta.json`` (fasdl.datasets.meta) names the classes "0".."9".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fasdl.datasets.meta import write_splits
from fasdl.datasets.output import staged_output
from fasdl.datasets.split import check_test_fraction, stratified_split

CLASS_NAMES = tuple(str(digit) for digit in range(10))


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
    check_test_fraction(test_fraction)
    x, y = digits_arrays()
    train_order, test_order = stratified_split(y, test_fraction, seed)
    with staged_output(out_dir, force=force) as staging:
        write_splits(staging, "images", (x[train_order], y[train_order]),
                     (x[test_order], y[test_order]), class_names=CLASS_NAMES)
    return {"train": len(train_order), "test": len(test_order)}
