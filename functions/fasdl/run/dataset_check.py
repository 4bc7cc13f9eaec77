"""The trigger's dataset check, before any worker starts (stdlib only: no numpy in the trigger).

``{dataset}/x.npy`` and ``y.npy`` (and, when present, the importer's ``test/`` split) must be
C-ordered .npy arrays of the right types whose object size is exactly header + rows × row
bytes, so a truncated upload is refused here, not found by a worker mid-run. The header is a
Python dict literal read with :func:`ast.literal_eval` (literals only, never executed).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fasdl.aws.s3_errors import is_missing
from fasdl.contract.errors import DatasetError
from fasdl.contract.keys import DATASET_ARRAYS, TEST_SPLIT, dataset_array_key
from fasdl.contract.plan import Plan, PlanError

RangeReader = Callable[[str, int, int], bytes]
SizeOf = Callable[[str], int | None]  # an object's size in bytes, None when it is missing
_ITEM_BYTES = {"|u1": 1, "<f4": 4, "<i4": 4, "<i8": 8}
_TEXT = "<i4"  # int32 text rows N x 2 x L: token ids, attention mask (fasdl.training.data)


@dataclass(frozen=True)
class NpyArray:
    shape: tuple[int, ...]
    descr: str
    data_offset: int  # where the rows start: the preamble and header before them

    def expected_size(self) -> int:
        return self.data_offset + math.prod(self.shape) * _ITEM_BYTES.get(self.descr, 0)


def read_npy_header(read_range: RangeReader, key: str) -> NpyArray:
    """Shape, dtype string and data offset of a .npy object, from its header alone."""
    preamble = read_range(key, 0, 12)
    if len(preamble) < 10 or not preamble.startswith(b"\x93NUMPY"):
        raise DatasetError(f"dataset object {key!r}: not a .npy file")
    size = 2 if preamble[6] == 1 else 4
    length = int.from_bytes(preamble[8:8 + size], "little")
    if length > 65536:
        raise DatasetError(f"dataset object {key!r}: .npy header of {length} bytes")
    header = read_range(key, 8 + size, 8 + size + length)
    try:  # the header is a Python dict literal; literal_eval evaluates literals only
        fields = ast.literal_eval(header.decode("latin1"))
        shape = tuple(int(n) for n in fields["shape"])
        descr = str(fields["descr"])
    except (ValueError, SyntaxError, KeyError, TypeError, MemoryError, RecursionError) as error:
        raise DatasetError(f"dataset object {key!r}: malformed .npy header ({error})") from None
    if fields.get("fortran_order") or not shape or min(shape) < 0:
        raise DatasetError(f"dataset object {key!r}: must be a C-ordered array of rows")
    return NpyArray(shape, descr, 8 + size + length)


def npy_shape(read_range: RangeReader, key: str) -> tuple[tuple[int, ...], str]:
    array = read_npy_header(read_range, key)
    return array.shape, array.descr


def _check_split(dataset: str, read_range: RangeReader, size_of: SizeOf, *,
                 test: bool = False) -> tuple[NpyArray, NpyArray]:
    """x and y of one split: present, typed, complete, as many rows each."""
    prefix = f"{dataset}/{TEST_SPLIT}" if test else dataset
    arrays = {name: dataset_array_key(dataset, name, test=test) for name in DATASET_ARRAYS}
    sizes = {name: size_of(key) for name, key in arrays.items()}
    missing = [arrays[name] for name, size in sizes.items() if size is None]
    if missing:
        raise PlanError("workload.dataset", f"dataset {prefix!r} not found in the datasets "
                                            f"bucket: missing {', '.join(missing)}")
    try:
        x, y = (read_npy_header(read_range, arrays[name]) for name in ("x", "y"))
    except DatasetError as error:
        raise PlanError("workload.dataset", str(error)) from None
    if x.descr not in ("|u1", "<f4", _TEXT) or y.descr != "<i8" or len(y.shape) != 1:
        raise PlanError("workload.dataset",
                        f"dataset {prefix!r}: x must be uint8/float32 (images) or int32 (text) "
                        f"and y 1-D int64, got x {x.descr} {x.shape}, y {y.descr} {y.shape}")
    if x.descr == _TEXT and (len(x.shape) != 3 or x.shape[1] != 2):
        raise PlanError("workload.dataset", f"dataset {prefix!r}: int32 text x must be "
                                            f"N x 2 x L (token ids; attention mask), got "
                                            f"shape {x.shape}")
    if x.descr != _TEXT and len(x.shape) not in (2, 4):
        raise PlanError("workload.dataset", f"dataset {prefix!r}: x must be N x C x H x W "
                                            f"(images) or N x F (feature vectors), got shape "
                                            f"{x.shape}")
    if x.shape[0] != y.shape[0]:
        raise PlanError("workload.dataset", f"dataset {prefix!r}: x has {x.shape[0]} rows, "
                                            f"y has {y.shape[0]}")
    for name, array in (("x", x), ("y", y)):
        if sizes[name] != array.expected_size():
            raise PlanError("workload.dataset",
                            f"dataset object {arrays[name]!r} holds {sizes[name]} bytes, but its "
                            f"header says {array.expected_size()} ({array.shape} {array.descr}):"
                            f" a truncated or corrupted upload; upload it again")
    return x, y


def check_dataset(plan: Plan, read_range: RangeReader, size_of: SizeOf) -> Plan:
    """Check the training split (and the test split when there is one), whole and typed,
    with at least ``workload.samples`` rows: the plan never changes silently."""
    prefix = plan.workload.dataset.rstrip("/")
    x, _ = _check_split(prefix, read_range, size_of)
    if plan.workload.samples > x.shape[0]:
        raise PlanError("workload.samples",
                        f"the plan trains on {plan.workload.samples} samples but dataset "
                        f"{prefix!r} holds {x.shape[0]} rows")
    shape = plan.workload.input_shape
    if shape is not None and tuple(shape) != tuple(x.shape[1:]):  # the model is built for it
        raise PlanError("workload.input_shape",
                        f"the plan's model takes rows of shape {list(shape)} but dataset "
                        f"{prefix!r} holds rows of {list(x.shape[1:])} (its meta.json's "
                        "input_shape): fix the plan or import the data again")
    test = f"{prefix}/{TEST_SPLIT}"
    if any(size_of(dataset_array_key(prefix, name, test=True)) is not None
           for name in DATASET_ARRAYS):
        test_x, _ = _check_split(prefix, read_range, size_of, test=True)
        if test_x.shape[1:] != x.shape[1:]:
            raise PlanError("workload.dataset", f"dataset {test!r}: rows of shape "
                                                f"{test_x.shape[1:]}, training rows are "
                                                f"{x.shape[1:]}")
    return plan


def s3_sizes(s3: Any, bucket: str) -> SizeOf:
    def size_of(key: str) -> int | None:
        try:
            size: int = s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
        except Exception as error:
            if is_missing(error):
                return None
            raise
        return size

    return size_of


def s3_ranges(s3: Any, bucket: str) -> RangeReader:
    def read_range(key: str, start: int, end: int) -> bytes:
        body: bytes = s3.get_object(Bucket=bucket, Key=key,
                                    Range=f"bytes={start}-{end - 1}")["Body"].read()
        return body

    return read_range
