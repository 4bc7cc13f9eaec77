"""A small cifar-10-binary.tar.gz for the importer's tests (test_dataset_import.py,
test_own_data_import.py)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np

from fasdl.datasets.cifar10 import RECORD_BYTES, TEST_FILES, TRAIN_FILES


def cifar_archive(path: Path, *, test_bytes: int | None = None) -> Path:
    """Two records a batch file; ``test_bytes`` damages the test batch (written last)."""
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as tar:
        for name in TRAIN_FILES + TEST_FILES:
            raw = np.concatenate([rng.integers(0, 10, (2, 1), dtype=np.uint8),
                                  rng.integers(0, 256, (2, RECORD_BYTES - 1), dtype=np.uint8)],
                                 axis=1).tobytes()
            if name in TEST_FILES and test_bytes is not None:
                raw = raw[:test_bytes]
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return path
