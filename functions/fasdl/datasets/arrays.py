"""Import arrays you already have: ``x.npy`` and ``y.npy``, or one ``.npz`` with ``x`` and ``y``.

``python -m fasdl.datasets arrays X.npy Y.npy OUT`` or ``... arrays DATA.npz OUT``. x holds the
rows in a dtype the workers read (fasdl.training.data): uint8 or float32 N×C×H×W images or
N×F feature vectors (input shape [F], for a model of your own), or int32 N×2×L text rows
(token ids; attention mask); float32 values must be finite. y holds integer labels 0..n-1,
every class present (stored as int64). Files are read without pickle (``allow_pickle=False``).
The train/test split is a seeded stratified shuffle (fasdl.datasets.split); ``train/meta.json``
(fasdl.datasets.meta) has the training split's mean and std (per channel for N×C×H×W, per
feature for N×F up to 32 features and one value past that, null for text).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from fasdl.contract.errors import DatasetError
from fasdl.datasets.meta import write_splits
from fasdl.datasets.output import staged_output
from fasdl.datasets.split import (
    DEFAULT_TEST_FRACTION,
    check_labels,
    check_test_fraction,
    stratified_split,
)
from fasdl.training.data import ALLOWED_X_DTYPES, X_DTYPE_NAMES, input_shape_of

USAGE = "X.npy Y.npy OUT or DATA.npz OUT"


def _load_npy(path: Path) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise DatasetError(f"{path}: not a readable .npy file ({error})") from None
    if not isinstance(array, np.ndarray):
        raise DatasetError(f"{path}: an .npz archive, expected one .npy array (or pass the "
                           f".npz alone: {USAGE})")
    return array


def _load_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise DatasetError(f"{path}: one .npy array, expected an .npz with x and y "
                                   f"(or pass {USAGE})")
            missing = [name for name in ("x", "y") if name not in archive.files]
            if missing:
                raise DatasetError(f"{path}: no array {' or '.join(missing)} (it holds "
                                   f"{', '.join(archive.files) or 'nothing'})")
            return archive["x"], archive["y"]
    except DatasetError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise DatasetError(f"{path}: not a readable .npz file ({error})") from None


def load_arrays(paths: list[str]) -> tuple[np.ndarray, np.ndarray, str]:
    """(x, y, what to name x's source) from ``[X.npy, Y.npy]`` or ``[DATA.npz]``."""
    if len(paths) == 2:
        return _load_npy(Path(paths[0])), _load_npy(Path(paths[1])), paths[0]
    if len(paths) == 1:
        return (*_load_npz(Path(paths[0])), paths[0])
    raise ValueError(f"arrays: expected {USAGE}, got {len(paths) + 1} paths")


def check_rows(source: str, x: np.ndarray, y: np.ndarray) -> None:
    """x in a dtype and shape the workers read, finite, as many rows as y."""
    if x.dtype not in ALLOWED_X_DTYPES:
        raise DatasetError(f"{source}: x dtype {x.dtype} not in {X_DTYPE_NAMES} (convert it, "
                           f"e.g. x.astype(numpy.float32))")
    if x.ndim < 2:
        raise DatasetError(f"{source}: x must have rows (N x F or N x C x H x W), got shape "
                           f"{x.shape}")
    input_shape_of(f"{source}: x", x.dtype, tuple(x.shape[1:]))
    if x.dtype == np.dtype("<f4") and not np.isfinite(x).all():
        raise DatasetError(f"{source}: x holds NaN or infinite values")
    if len(x) != len(y):
        raise DatasetError(f"{source}: x has {len(x)} rows, y has {len(y)}")


def import_arrays(paths: list[str], out_dir: str | Path, *,
                  test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0,
                  force: bool = False) -> dict[str, int]:
    """Write ``{out_dir}/train`` (with meta.json) and ``{out_dir}/test``, both or neither
    (fasdl.datasets.output); returns rows per split."""
    check_test_fraction(test_fraction)
    x, y, source = load_arrays(paths)
    check_labels(f"{paths[-1]}: y", y)
    check_rows(source, x, y)
    labels = y.astype(np.int64)
    train_rows, test_rows = stratified_split(labels, test_fraction, seed)
    with staged_output(out_dir, force=force) as staging:
        write_splits(staging, "arrays", (x[train_rows], labels[train_rows]),
                     (x[test_rows], labels[test_rows]))
    return {"train": len(train_rows), "test": len(test_rows)}
