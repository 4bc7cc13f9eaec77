"""Import the CIFAR-10 *binary* distribution (cifar-10-binary.tar.gz) without pickle.

The binary version stores records of 1 label byte + 3072 pixel bytes (1024 red, 1024 green,
1024 blue, row-major 32×32), so a batch file reshapes directly to N×3×32×32 uint8. The
python version of CIFAR-10 is a pickle and is deliberately not supported. ``train/meta.json``
(fasdl.datasets.meta) names the ten classes in label order.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np

from fasdl.contract.errors import DatasetError
from fasdl.datasets.meta import write_splits
from fasdl.datasets.output import staged_output

RECORD_BYTES = 1 + 3 * 32 * 32
TRAIN_FILES = tuple(f"data_batch_{index}.bin" for index in range(1, 6))
TEST_FILES = ("test_batch.bin",)
NUM_CLASSES = 10
CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
               "truck")  # batches.meta.txt's order: label i is CLASS_NAMES[i]


def parse_batch(name: str, raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """One .bin batch as (x uint8 N×3×32×32, y int64 N)."""
    if len(raw) % RECORD_BYTES:
        raise DatasetError(f"{name}: {len(raw)} bytes is not a multiple of {RECORD_BYTES}")
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, RECORD_BYTES)
    labels = records[:, 0].astype(np.int64)
    if labels.size and labels.max() >= NUM_CLASSES:
        raise DatasetError(f"{name}: label {labels.max()} outside 0..{NUM_CLASSES - 1}")
    return records[:, 1:].reshape(-1, 3, 32, 32).copy(), labels


def _read_batches(archive: str | Path) -> dict[str, bytes]:
    """Every batch file of the archive, by name; a clear DatasetError for anything else."""
    batches: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if member.isfile() and name in TRAIN_FILES + TEST_FILES:
                    handle = tar.extractfile(member)
                    if handle is None:
                        raise DatasetError(f"{archive}: cannot read {member.name}")
                    batches[name] = handle.read()
    except (tarfile.TarError, EOFError, OSError) as error:
        raise DatasetError(f"{archive}: not a readable cifar-10-binary.tar.gz ({error})") \
            from error
    missing = [name for name in TRAIN_FILES + TEST_FILES if name not in batches]
    if missing:
        raise DatasetError(f"{archive}: missing {', '.join(missing)}")
    return batches


def import_cifar10_binary(archive: str | Path, out_dir: str | Path, *,
                          force: bool = False) -> dict[str, int]:
    """Write ``{out_dir}/train`` and ``{out_dir}/test`` datasets, both or neither
    (fasdl.datasets.output); returns rows per split."""
    batches = _read_batches(archive)
    splits: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split, names in (("train", TRAIN_FILES), ("test", TEST_FILES)):
        parts = [parse_batch(name, batches[name]) for name in names]
        splits[split] = (np.concatenate([part[0] for part in parts]),
                         np.concatenate([part[1] for part in parts]))
    with staged_output(out_dir, force=force) as staging:
        write_splits(staging, "images", splits["train"], splits["test"],
                     class_names=CLASS_NAMES)
    return {split: len(splits[split][1]) for split in ("train", "test")}
