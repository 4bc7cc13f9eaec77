"""Where an importer writes: both splits appear together or not at all.

The splits are written into a temporary folder beside the output folder (same file system,
so the final rename is atomic), read back and checked (the header's row count agrees with the
file size, x and y have as many rows), and only then renamed into place. A failure at any
point (bad archive, full disk, interrupt) leaves the output folder as it was. A non-empty
output folder is refused unless ``force``: then it is replaced whole, so no stale ``test/``
survives next to new training data.

Layout: ``<out>/train/{x,y}.npy``, ``<out>/train/meta.json`` (fasdl.datasets.meta; checked
against the rows too) and ``<out>/test/{x,y}.npy``. Upload ``train/`` to the dataset prefix
itself and ``test/`` under it (README, "Deploying to AWS").
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from fasdl.contract.errors import DatasetError

SPLITS = ("train", "test")


class OutputFolderError(DatasetError):
    """The output folder cannot take the import (not empty, not a folder)."""


def _check_free(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise OutputFolderError(f"output {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise OutputFolderError(
            f"output folder {out}: not empty; pass --force to replace it whole (nothing is "
            "written until the import is complete)")


def _verify(folder: Path) -> dict[str, int]:
    """Rows per split, after reading each file back and checking it against its size."""
    rows: dict[str, int] = {}
    for split in SPLITS:
        arrays = [np.load(folder / split / f"{name}.npy", mmap_mode="r", allow_pickle=False)
                  for name in ("x", "y")]
        for name, array in zip(("x", "y"), arrays, strict=True):
            path = folder / split / f"{name}.npy"
            if array.nbytes > path.stat().st_size:
                raise DatasetError(f"{path}: truncated ({path.stat().st_size} bytes for "
                                   f"{array.shape} {array.dtype})")
        if len(arrays[0]) != len(arrays[1]):
            raise DatasetError(f"{folder / split}: x has {len(arrays[0])} rows, y "
                               f"{len(arrays[1])}")
        rows[split] = len(arrays[1])
    _verify_meta(folder / "train" / "meta.json", rows)
    return rows


def _verify_meta(path: Path, rows: dict[str, int]) -> None:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DatasetError(f"{path}: not a readable meta.json ({error})") from error
    if (meta.get("samples"), meta.get("test_samples")) != (rows["train"], rows["test"]):
        raise DatasetError(f"{path}: says {meta.get('samples')} training and "
                           f"{meta.get('test_samples')} test rows, the splits hold "
                           f"{rows['train']} and {rows['test']}")


@contextmanager
def staged_output(out_dir: str | Path, *, force: bool = False) -> Iterator[Path]:
    """Yield a temporary folder to write both splits into; on success it replaces
    ``out_dir`` atomically, on any error it is removed and ``out_dir`` is untouched."""
    out = Path(out_dir)
    _check_free(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        yield staging
        _verify(staging)
        if out.is_dir() and any(out.iterdir()):  # force: move the old one aside first
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            out.rename(old / out.name)
            staging.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.replace(out)  # an empty folder is replaced in one rename
    finally:
        shutil.rmtree(staging, ignore_errors=True)
