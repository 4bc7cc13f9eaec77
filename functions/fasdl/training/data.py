"""Datasets as plain .npy arrays, per-worker partitions read by byte range, batch streams.

Format: under a prefix, ``x.npy`` (uint8 or float32, rows first, C-order, e.g. N×C×H×W; or int32
text rows N×2×L, token ids then attention mask) and ``y.npy`` (int64 labels). No pickle
anywhere: arrays load with ``allow_pickle=False`` and the ranged reader parses only the .npy
header and then slices raw bytes. A worker's partition is the contiguous row range [start, end)
given by :func:`partition_bounds` over ``fasdl.contract.plan.partition_sizes``; it is fetched once
per
container and cached on local disk (``/tmp`` in Lambda), so warm invocations skip the download.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fasdl.contract import keys
from fasdl.contract.errors import DatasetError
from fasdl.contract.plan import Plan

# read_range(key, start, end) -> the bytes [start, end) of the object (end exclusive)
RangeReader = Callable[[str, int, int], bytes]

TEXT_DTYPE = np.dtype("<i4")  # token ids and attention masks (fasdl.datasets.cola)
ALLOWED_X_DTYPES = (np.dtype(np.uint8), np.dtype("<f4"), TEXT_DTYPE)
X_DTYPE_NAMES = "uint8/float32 (images) or int32 (text)"
LABEL_DTYPE = np.dtype("<i8")
_NPY_PREAMBLE = 12  # magic (6) + version (2) + header length (2 in v1, 4 in v2/v3)


@dataclass(frozen=True)
class NpyLayout:
    """Where the rows of a .npy file live: ``data_offset`` + row · ``row_bytes``."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    data_offset: int

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def row_shape(self) -> tuple[int, ...]:
        return self.shape[1:]

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize


def read_layout(read_range: RangeReader, key: str) -> NpyLayout:
    """Parse the .npy header of ``key`` with two small ranged reads."""
    preamble = read_range(key, 0, _NPY_PREAMBLE)
    stream = io.BytesIO(preamble)
    try:
        major, _minor = np.lib.format.read_magic(stream)
    except ValueError as error:
        raise DatasetError(f"{key}: not a .npy file ({error})") from error
    length_bytes = 2 if major == 1 else 4
    header_length = int.from_bytes(preamble[8:8 + length_bytes], "little")
    data_offset = 8 + length_bytes + header_length
    stream = io.BytesIO(read_range(key, 0, data_offset))
    np.lib.format.read_magic(stream)
    reader = (np.lib.format.read_array_header_1_0 if major == 1
              else np.lib.format.read_array_header_2_0)
    shape, fortran_order, dtype = reader(stream)
    if fortran_order:
        raise DatasetError(f"{key}: Fortran-ordered arrays cannot be read by row range")
    if dtype.hasobject:
        raise DatasetError(f"{key}: object arrays are not allowed (they need pickle)")
    if len(shape) < 1:
        raise DatasetError(f"{key}: expected at least one dimension, got a scalar")
    return NpyLayout(dtype, tuple(shape), data_offset)


def read_rows(read_range: RangeReader, key: str, start: int, end: int,
              layout: NpyLayout | None = None) -> np.ndarray:
    """Rows [start, end) of the .npy object ``key``, one ranged read for the payload."""
    layout = layout or read_layout(read_range, key)
    if not 0 <= start <= end <= layout.rows:
        raise DatasetError(f"{key}: rows [{start}, {end}) outside [0, {layout.rows})")
    first = layout.data_offset + start * layout.row_bytes
    payload = read_range(key, first, first + (end - start) * layout.row_bytes)
    expected = (end - start) * layout.row_bytes
    if len(payload) != expected:
        raise DatasetError(f"{key}: short read, {len(payload)} bytes instead of {expected}")
    rows = np.frombuffer(payload, dtype=layout.dtype).reshape((end - start, *layout.row_shape))
    return rows.copy()  # writable and independent of the download buffer


class LocalFiles:
    """A RangeReader over files under ``root`` (tests, local runs)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __call__(self, key: str, start: int, end: int) -> bytes:
        with (self.root / key).open("rb") as handle:
            handle.seek(start)
            return handle.read(end - start)


class _S3Client(Protocol):
    def get_object(self, **kwargs: Any) -> dict[str, Any]: ...


def s3_range_reader(client: _S3Client, bucket: str) -> RangeReader:
    """A RangeReader over an S3 bucket using HTTP Range (boto3 client)."""

    def read_range(key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        response = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}")
        body: bytes = response["Body"].read()
        return body

    return read_range


def class_count(labels: np.ndarray) -> int:
    """Outputs of the network's head: max label + 1, at least 2 (labels are 0..n−1)."""
    return max(2, int(labels.max()) + 1)


def partition_bounds(sizes: Sequence[int], worker: int) -> tuple[int, int]:
    """Worker ``worker``'s rows [start, end) when partitions are laid out in worker order."""
    if not 0 <= worker < len(sizes):
        raise ValueError(f"worker must be in [0, {len(sizes)}), got {worker}")
    start = sum(sizes[:worker])
    return start, start + sizes[worker]


def plan_partition(plan: Plan, worker: int) -> tuple[int, int]:
    """Worker ``worker``'s rows under ``plan`` (sizes from ``Plan.partition_sizes``)."""
    return partition_bounds(plan.partition_sizes(), worker)


@dataclass(frozen=True)
class Partition:
    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


def _save_atomically(path: Path, array: np.ndarray) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".part")
    with os.fdopen(handle, "wb") as stream:
        np.save(stream, array, allow_pickle=False)
    os.replace(temporary, path)  # concurrent invocations never see a half-written cache


def load_partition(read_range: RangeReader, prefix: str, start: int, end: int,
                   cache_dir: str | Path | None = None) -> Partition:
    """Rows [start, end) of ``{prefix}/x.npy`` and ``{prefix}/y.npy``, cached on disk."""
    prefix = prefix.rstrip("/")
    cached: dict[str, Path] = {}
    if cache_dir is not None:
        directory = Path(cache_dir)
        directory.mkdir(parents=True, exist_ok=True)
        tag = hashlib.sha256(f"{prefix}:{start}:{end}".encode()).hexdigest()[:24]
        cached = {name: directory / f"{tag}-{name}.npy" for name in ("x", "y")}
        if all(path.exists() for path in cached.values()):
            return _checked(prefix, np.load(cached["x"], allow_pickle=False),
                            np.load(cached["y"], allow_pickle=False), end - start)
    x = read_rows(read_range, keys.dataset_array_key(prefix, "x"), start, end)
    y = read_rows(read_range, keys.dataset_array_key(prefix, "y"), start, end)
    partition = _checked(prefix, x, y, end - start)
    for name, path in cached.items():
        _save_atomically(path, x if name == "x" else y)
    return partition


def _checked(prefix: str, x: np.ndarray, y: np.ndarray, rows: int) -> Partition:
    if x.dtype not in ALLOWED_X_DTYPES:
        raise DatasetError(f"{prefix}/x.npy: dtype {x.dtype} not in {X_DTYPE_NAMES}")
    if y.dtype != LABEL_DTYPE or y.ndim != 1:
        raise DatasetError(f"{prefix}/y.npy: expected 1-D int64 labels, got {y.dtype} {y.shape}")
    if len(x) != rows or len(y) != rows:
        raise DatasetError(f"{prefix}: expected {rows} rows, got x {len(x)} and y {len(y)}")
    return Partition(x, y)


def write_dataset(directory: str | Path, x: np.ndarray, y: np.ndarray) -> None:
    """Write ``x.npy``/``y.npy`` in the dataset format (validated first)."""
    _checked(str(directory), x, y, len(x))
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    np.save(path / "x.npy", np.ascontiguousarray(x), allow_pickle=False)
    np.save(path / "y.npy", np.ascontiguousarray(y), allow_pickle=False)


def epoch_order(size: int, seed: int, epoch: int, worker: int) -> np.ndarray:
    """The permutation of a partition's rows for one epoch, a pure function of its inputs."""
    return np.random.default_rng([seed, epoch, worker]).permutation(size)


@dataclass(frozen=True)
class DataCursor:
    """Where a worker is in its data: ``position`` batches into ``epoch``."""

    epoch: int = 0
    position: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataCursor:
        epoch, position = data.get("epoch"), data.get("position")
        if not isinstance(epoch, int) or not isinstance(position, int) or min(epoch,
                                                                              position) < 0:
            raise DatasetError(f"data cursor needs non-negative integers, got {data!r}")
        return cls(epoch, position)


def input_shape_of(key: str, dtype: np.dtype[Any], row_shape: tuple[int, ...]
                   ) -> tuple[int, ...]:
    """The model input shape of rows of ``key``: C×H×W images, F-feature vectors (rows
    N×F, input shape [F]: for a model of your own), or 2×L int32 text rows."""
    if dtype == TEXT_DTYPE:
        if len(row_shape) != 2 or row_shape[0] != 2 or row_shape[1] < 1:
            raise DatasetError(f"{key}: int32 text rows must be N x 2 x L (token ids; "
                               f"attention mask), got rows of {row_shape}")
    elif len(row_shape) not in (1, 3) or min(row_shape) < 1:
        raise DatasetError(f"{key}: uint8/float32 rows must be N x C x H x W (images) or "
                           f"N x F (feature vectors), got rows of {row_shape}")
    return tuple(int(n) for n in row_shape)


class BatchStream:
    """Batches of one worker's partition: each epoch a fresh shuffle, fixed iterations.

    Every worker runs the plan's ``iterations_per_epoch`` iterations with its own batch size,
    so epochs stay aligned across workers; the rows beyond ``iterations · batch`` of a
    shuffled epoch are left out, as in the plan's floor(D / B^g).
    """

    def __init__(self, partition: Partition, batch_size: int, iterations_per_epoch: int, *,
                 seed: int, worker: int, cursor: DataCursor | None = None) -> None:
        if batch_size * iterations_per_epoch > len(partition):
            raise DatasetError(f"partition of {len(partition)} rows cannot feed "
                               f"{iterations_per_epoch} batches of {batch_size}")
        self.partition = partition
        self.batch_size = batch_size
        self.iterations_per_epoch = iterations_per_epoch
        self.seed = seed
        self.worker = worker
        self.cursor = cursor or DataCursor()
        self._order_epoch = -1
        self._order = np.empty(0, dtype=np.int64)

    @classmethod
    def for_plan(cls, plan: Plan, worker: int, partition: Partition,
                 cursor: DataCursor | None = None) -> BatchStream:
        return cls(partition, plan.batch_of(worker), plan.iterations_per_epoch,
                   seed=plan.training.seed, worker=worker, cursor=cursor)

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        epoch, position = self.cursor.epoch, self.cursor.position
        if epoch != self._order_epoch:
            self._order = epoch_order(len(self.partition), self.seed, epoch, self.worker)
            self._order_epoch = epoch
        rows = self._order[position * self.batch_size:(position + 1) * self.batch_size]
        position += 1
        self.cursor = (DataCursor(epoch + 1, 0) if position == self.iterations_per_epoch
                       else DataCursor(epoch, position))
        return self.partition.x[rows], self.partition.y[rows]
