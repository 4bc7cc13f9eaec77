"""Profiler samples: the JSONL records ``functions/fasdl/profiling/measure.py`` writes, parsed and
checked.

Every malformed record raises :class:`SampleError` naming the file, line and field.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from fasdl.contract.fields import is_number
from fasdl.contract.json_input import JsonInputError, load_json_bytes
from planner.model.inputs.profiles import DIRECTIONS

KINDS = ("train", "transfer", "duplex")


class SampleError(ValueError):
    """Samples that are malformed or cannot identify a parameter; names the CLI argument."""

    def __init__(self, message: str, argument: str = "--samples") -> None:
        super().__init__(message)
        self.argument = argument


@dataclass(frozen=True)
class TrainSample:
    memory_mb: float
    batch: int
    seconds: float  # one training iteration (median over repeats)
    peak_mb: float | None  # peak resident memory of the process while training this batch
    model: str
    model_mb: float | None = None
    cpu_s: float | None = None  # process CPU of that iteration (older samples: not recorded)


@dataclass(frozen=True)
class TransferRecord:
    memory_mb: float
    channel: str
    direction: str
    size_mb: float
    seconds: float
    arch: str | None = None
    cpu_s: float | None = None  # process CPU of the transfer (older samples: not recorded)
    fold_cpu_s: float | None = None  # a download's: folding its values as an aggregator does
    bf16_cpu_s: float | None = None  # the bfloat16 codec's: framing an upload, folding a copy


@dataclass(frozen=True)
class DuplexRecord:
    """An upload and downloads of about the same time, one after the other and at once."""

    memory_mb: float
    channel: str
    size_mb: float
    seconds: float  # both at once
    up_s: float
    down_s: float

    def duplex(self) -> float:
        """d of U ∥ D = max(U, D, (1 − d/2)·(U + D)) (planner/model/terms/pipelined.py): for U = D
        the share of one hidden by the other; 2·(1 − T/(U + D)) in [0, 1]."""
        return min(1.0, max(0.0, 2.0 * (1.0 - self.seconds / (self.up_s + self.down_s))))


class OnChannel(Protocol):
    """A measurement over one channel."""

    @property
    def channel(self) -> str: ...


Measured = TypeVar("Measured", bound=OnChannel)


def by_channel(records: Iterable[Measured]) -> dict[str, list[Measured]]:
    """``records`` grouped by their channel, each group in the records' order: a fit reads the
    group of the channel it fits."""
    grouped: dict[str, list[Measured]] = defaultdict(list)
    for record in records:
        grouped[record.channel].append(record)
    return dict(grouped)


def by_direction(records: Iterable[TransferRecord]) -> dict[str, list[TransferRecord]]:
    """Transfer records grouped by direction, each group in the records' order."""
    grouped: dict[str, list[TransferRecord]] = defaultdict(list)
    for record in records:
        grouped[record.direction].append(record)
    return dict(grouped)


@dataclass
class Samples:
    train: list[TrainSample]
    transfer: list[TransferRecord]
    duplex: list[DuplexRecord] = field(default_factory=list)


def _positive(record: dict[str, Any], name: str, where: str, *, optional: bool = False,
              zero: bool = False) -> Any:
    """Field ``name``: a finite number > 0 (>= 0 with ``zero``); None if ``optional`` and
    absent."""
    value = record.get(name)
    if value is None and optional:
        return None
    if not is_number(value) or not math.isfinite(value) or value < 0 or (value == 0
                                                                          and not zero):
        wanted = "a number >= 0" if zero else "a positive number"
        raise SampleError(f"{where}: field {name!r} must be {wanted}, got {value!r}")
    return value


def parse_record(record: object, where: str) -> TrainSample | TransferRecord | DuplexRecord:
    if not isinstance(record, dict) or record.get("kind") not in KINDS:
        raise SampleError(f"{where}: expected an object with kind {' or '.join(KINDS)}")
    memory = float(_positive(record, "memory_mb", where))
    seconds = float(_positive(record, "seconds", where))
    if record["kind"] == "train":
        batch = _positive(record, "batch", where)
        if not isinstance(batch, int):
            raise SampleError(f"{where}: field 'batch' must be an integer, got {batch!r}")
        model = record.get("model")
        if not isinstance(model, str) or not model:
            raise SampleError(f"{where}: field 'model' must be a model name, got {model!r}")
        peak = _positive(record, "peak_mb", where, optional=True)
        model_mb = _positive(record, "model_mb", where, optional=True)
        train_cpu = _positive(record, "cpu_s", where, optional=True, zero=True)
        return TrainSample(memory, batch, seconds, None if peak is None else float(peak), model,
                           None if model_mb is None else float(model_mb),
                           None if train_cpu is None else float(train_cpu))
    channel, direction = record.get("channel"), record.get("direction")
    if channel not in ("s3", "valkey"):
        raise SampleError(f"{where}: field 'channel' must be s3 or valkey, got {channel!r}")
    if record["kind"] == "duplex":
        return DuplexRecord(memory, str(channel), float(_positive(record, "size_mb", where)),
                            seconds, float(_positive(record, "up_s", where)),
                            float(_positive(record, "down_s", where)))
    if direction not in DIRECTIONS:
        raise SampleError(f"{where}: field 'direction' must be up or down, got {direction!r}")
    arch = record.get("arch")
    # CPU times may read 0: a fast step can fall below the clock's resolution
    codec = "bf16_frame_cpu_s" if direction == "up" else "bf16_fold_cpu_s"
    cpu_s, fold_cpu_s, bf16_cpu_s = (
        None if value is None else float(value)
        for value in (_positive(record, name, where, optional=True, zero=True)
                      for name in ("cpu_s", "fold_cpu_s", codec)))
    return TransferRecord(memory, str(channel), str(direction),
                          float(_positive(record, "size_mb", where)), seconds,
                          arch if isinstance(arch, str) else None, cpu_s, fold_cpu_s, bf16_cpu_s)


def read_samples(paths: Sequence[str | Path]) -> Samples:
    """Every record of the JSONL files; blank lines are skipped, anything else must parse."""
    samples = Samples([], [])
    for path in paths:
        try:
            raw = Path(path).read_bytes()
        except OSError as error:
            raise SampleError(f"cannot read {path}: {error}") from error
        for number, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:  # the shared reader: UTF-8, nesting and number limits, one error type
                record = load_json_bytes(line, what=f"{path}:{number}:", max_bytes=2**20,
                                         max_depth=4)
            except JsonInputError as error:
                raise SampleError(str(error)) from error
            parsed = parse_record(record, f"{path}:{number}")
            if isinstance(parsed, TrainSample):
                samples.train.append(parsed)
            elif isinstance(parsed, DuplexRecord):
                samples.duplex.append(parsed)
            else:
                samples.transfer.append(parsed)
    if not samples.train and not samples.transfer:
        raise SampleError(f"no samples in {', '.join(map(str, paths))}")
    return samples
