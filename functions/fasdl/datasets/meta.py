"""``train/meta.json``: what an importer wrote, for the planner and for people.

Every importer writes, beside ``train/x.npy`` and ``train/y.npy`` (and inside the same atomic
output, fasdl.datasets.output)::

    {"format": 1, "kind": "images" | "arrays" | "text", "input_shape": [...],
     "classes": n, "class_names": [...] | null, "samples": training rows,
     "test_samples": test rows, "mean": [...] | null, "std": [...] | null}

``input_shape`` is one row's shape (C, H, W; F; or 2, L for text). ``mean`` and ``std`` are
the training split's statistics as the workers see the rows (uint8 scaled to [0, 1] like
fasdl.training.augment.to_tensors; float32 as is): per channel (axis 1) for N×C×H×W rows, per
feature for N×F rows of at most :data:`PER_FEATURE_MAX` features (tabular features differ in
scale, as scikit-learn's StandardScaler has one pair each), one value over all features for
wider rows (their pairs would not fit the 3 KiB plan the trigger carries in its environment,
fasdl.contract.plan); population std (ddof 0), accumulated in float64, at least 1e-6; null
for text. They are what ``workload.normalization`` takes (the ``images``
and ``normalize`` augmentations, fasdl.training.augment).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasdl.contract.errors import DatasetError
from fasdl.training.data import TEXT_DTYPE, write_dataset

META_FILE = "meta.json"
META_FORMAT = 1
KINDS = ("images", "arrays", "text")
STD_FLOOR = 1e-6
# 2 × 32 values of ~20 characters, about 1.3 KB, beside a planned plan's own ~1.3 KB
# (tests/infra/plans/valkey_arm64.json) inside the 3 KiB the trigger's environment holds
PER_FEATURE_MAX = 32
_CHUNK_VALUES = 1 << 22  # float64 values per chunk: 32 MiB, whatever the dataset's size


def _channels(x: np.ndarray) -> np.ndarray:
    """``x`` viewed as N × C × values (N×F rows: F channels of one value each, or one channel
    of F values past :data:`PER_FEATURE_MAX`)."""
    if x.ndim == 2 and x.shape[1] <= PER_FEATURE_MAX:
        return x.reshape(len(x), x.shape[1], 1)
    channels = x.shape[1] if x.ndim > 2 else 1
    return x.reshape(len(x), channels, -1)


def channel_statistics(x: np.ndarray) -> tuple[list[float], list[float]] | None:
    """Per-channel (mean, std) of rows ``x`` as the workers scale them; None for text."""
    if x.dtype == TEXT_DTYPE:
        return None
    if len(x) == 0:
        raise DatasetError("cannot compute the statistics of an empty training split")
    rows = _channels(x)
    scale = 1.0 / 255.0 if x.dtype == np.uint8 else 1.0
    step = max(1, _CHUNK_VALUES // max(1, rows[0].size))
    count = len(rows) * rows.shape[2]
    total = np.zeros(rows.shape[1])
    for start in range(0, len(rows), step):
        total += (rows[start:start + step].astype(np.float64) * scale).sum(axis=(0, 2))
    mean = total / count
    squares = np.zeros(rows.shape[1])
    for start in range(0, len(rows), step):  # a second pass: no cancellation in E[x²] − E[x]²
        centred = rows[start:start + step].astype(np.float64) * scale - mean[None, :, None]
        squares += (centred * centred).sum(axis=(0, 2))
    std = np.maximum(np.sqrt(squares / count), STD_FLOOR)
    return [float(value) for value in mean], [float(value) for value in std]


def dataset_meta(kind: str, train: tuple[np.ndarray, np.ndarray], test_rows: int, *,
                 classes: int, class_names: Sequence[str] | None = None) -> dict[str, Any]:
    """The meta.json object of a dataset whose training split is ``train``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if class_names is not None and len(class_names) != classes:
        raise ValueError(f"{len(class_names)} class names for {classes} classes")
    statistics = channel_statistics(train[0])
    return {"format": META_FORMAT, "kind": kind,
            "input_shape": [int(n) for n in train[0].shape[1:]], "classes": int(classes),
            "class_names": None if class_names is None else [str(n) for n in class_names],
            "samples": len(train[1]), "test_samples": int(test_rows),
            "mean": None if statistics is None else statistics[0],
            "std": None if statistics is None else statistics[1]}


def write_splits(staging: Path, kind: str, train: tuple[np.ndarray, np.ndarray],
                 test: tuple[np.ndarray, np.ndarray], *,
                 class_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Write ``staging/{train,test}/{x,y}.npy`` and ``staging/train/meta.json``; returns the
    meta. Classes: the names' count, else max label + 1 over both splits."""
    labels = np.concatenate([train[1], test[1]])
    classes = len(class_names) if class_names is not None else int(labels.max()) + 1
    if labels.size and not 0 <= int(labels.min()) <= int(labels.max()) < classes:
        raise DatasetError(f"labels {int(labels.min())}..{int(labels.max())} outside "
                           f"0..{classes - 1}")
    write_dataset(staging / "train", *train)
    write_dataset(staging / "test", *test)
    meta = dataset_meta(kind, train, len(test[1]), classes=classes, class_names=class_names)
    lines = ",\n".join(f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in meta.items())
    (staging / "train" / META_FILE).write_text(f"{{\n{lines}\n}}\n", encoding="utf-8")
    return meta


def read_meta(out_dir: str | Path) -> dict[str, Any]:
    """The meta.json of an imported dataset ``out_dir`` (its ``train/meta.json``)."""
    path = Path(out_dir) / "train" / META_FILE
    try:
        meta: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DatasetError(f"{path}: not a readable meta.json ({error})") from error
    return meta
