"""The profiler: measure one function memory M for the planner's fit (``python -m planner fit``).

Per invocation (one M, the function's configured memory):

* **training time** of one iteration (forward, backward, SGD step with momentum) of a registry
  model on random inputs of the workload's shape, per batch size: ``warmup`` untimed
  iterations, then the median of ``repeats`` timed ones, each after a pause of
  ``STEP_PAUSE_S``, and the median process CPU of those steps (``cpu_s``). In a run a step
  follows the exchange's waits, so under a CPU quota (CFS bandwidth control) it starts with the
  period's unused quota: a step of a few ms runs at a core's speed, not at M/1769 of one.
  Timed back to back under the emulator's cap instead, such steps measured erratically
  (docs/results.md, "Measurements behind design choices");
* **peak memory** per batch size: the process's resident high-water mark, ``VmHWM`` of
  /proc/self/status (``ru_maxrss`` where /proc is missing). The mark is reset before each
  batch by writing ``5`` to /proc/self/clear_refs; where that is not allowed the mark only
  grows, so batches run in ascending order and each reading is still the peak up to that
  batch, which is the largest batch's own peak because memory grows with B. The number is
  the whole process (Python, torch, model, optimizer state, activations), which is what a
  Lambda memory size must hold; the dataset partition a worker caches is not included.
  tracemalloc would miss torch's native allocations, so it is not used;
* **transfer time** (fasdl.profiling.transfers, as is the duplex below) of shard frames of
  each size through the exchange channel(s): encode +
  ``put`` (up) and ``get`` + decode (down) of random float32 values, as workers exchange
  them, ``transfer_repeats`` times, after one untimed round trip that opens the connection
  (workers reuse theirs); each also records the process CPU it took (``cpu_s``), and a
  download the CPU of folding the values into a float64 sum as an aggregator does
  (``fold_cpu_s``): at a fraction of a vCPU that CPU, not the network, can set the pace; the
  first repeat of each size also the bfloat16 codec's framing of an upload
  (``bf16_frame_cpu_s``) and fold of a copy (``bf16_fold_cpu_s``; fasdl.exchange.cpu_cost);
* **duplex**: an upload of one size (the largest profiled size up to 16 MB) and as many
  downloads of it as take about as long, first one after the other, then both at once,
  ``transfer_repeats`` times: whether a function's upload and download overlap, which the
  pipelined exchange relies on.

Samples are JSON lines (one object each) written to ``profiles/<profile_id>/memory-<M>.jsonl``
in the results bucket::

    {"kind": "train", "memory_mb": 2048, "batch": 32, "seconds": 0.041, "cpu_s": 0.052,
     "peak_mb": 412.5,
     "model": "cnn", "model_mb": 0.02, "input_shape": [3, 32, 32], "num_classes": 10,
     "repeats": 5, "threads": 2, "peak_method": "VmHWM-reset"}
    {"kind": "transfer", "memory_mb": 2048, "channel": "s3", "direction": "up",
     "size_mb": 4.0, "seconds": 0.094, "cpu_s": 0.011, "arch": "x86_64"}
    {"kind": "duplex", "memory_mb": 2048, "channel": "s3", "size_mb": 16.0, "downloads": 2,
     "seconds": 0.31, "up_s": 0.29, "down_s": 0.27, "arch": "x86_64"}

``collect`` concatenates the per-memory files into ``profiles/<profile_id>/samples.jsonl``.
"""

from __future__ import annotations

import json
import re
import resource
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasdl.contract.fields import PlanError, is_int_at_least, is_number
from fasdl.contract.keys import profile_memory_key, profile_samples_key, profile_transfer_prefix
from fasdl.contract.user_code import ModelRef
from fasdl.contract.workload import MAX_INPUT_DIMS
from fasdl.exchange.channel.base import Channel
from fasdl.profiling.transfers import duplex_size_mb, measure_duplex, measure_transfers

PROFILES_PREFIX = "profiles/"
# Input shapes and classes of the datasets the runtime ships, so events can name one.
DATASET_SHAPES: dict[str, tuple[tuple[int, int, int], int]] = {
    "digits": ((1, 8, 8), 10), "cifar10": ((3, 32, 32), 10),
}
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}$")
MAX_OBJECT_MB = 512.0
# Before each timed step: about one CFS period (Linux's default 100 ms; Lambda does not publish
# its own), so the step starts with the quota a run's step finds after its exchange's waits.
STEP_PAUSE_S = 0.1
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


class ProfileRequestError(ValueError):
    """An invalid profiler event; the message names the field."""


def _bad(name: str, message: str) -> ProfileRequestError:
    return ProfileRequestError(f"profiler field '{name}': {message}")


def _ints(name: str, value: object, low: int) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not value or any(
            not is_int_at_least(v, low) for v in value):
        raise _bad(name, f"must be a non-empty list of integers >= {low}, got {value!r}")
    return tuple(sorted(set(value)))


def _count(name: str, value: object, low: int) -> int:
    if not is_int_at_least(value, low):
        raise _bad(name, f"must be an integer >= {low}, got {value!r}")
    return value


@dataclass(frozen=True)
class ProfileRequest:
    """What to measure at one memory; every field but ``profile_id`` has a default."""

    profile_id: str
    model: str = "cnn"
    input_shape: tuple[int, ...] = (3, 32, 32)
    num_classes: int = 10
    batches: tuple[int, ...] = (16, 32, 64, 128)
    warmup: int = 2
    repeats: int = 5
    sizes_mb: tuple[float, ...] = (0.0625, 0.25, 1.0, 4.0, 16.0, 64.0)
    transfer_repeats: int = 3
    channels: tuple[str, ...] | None = None  # None: every channel the function can reach

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> ProfileRequest:
        profile_id = event.get("profile_id")
        if not isinstance(profile_id, str) or not _ID.fullmatch(profile_id):
            raise _bad("profile_id", f"must be 1-80 letters, digits, '_.-', got {profile_id!r}")
        values: dict[str, Any] = {"profile_id": profile_id}
        for name, parse in _EVENT_FIELDS.items():  # in order: dataset before its overrides
            if name in event:
                values.update(parse(event[name]))
        return cls(**values)


def _model_field(model: object) -> dict[str, Any]:
    from fasdl.training.networks import MODELS

    try:
        ref: ModelRef | None = ModelRef.parse(model, "model")
    except PlanError:
        ref = None
    if ref is not None and ref.code is not None:
        return {"model": model}  # the user's own builder: imported when measured
    if ref is None or ref.name not in MODELS:
        raise _bad("model", f"must be one of {', '.join(sorted(MODELS))} or "
                            f"path/to/file.py:function, got {model!r}")
    return {"model": model}


def _dataset_field(dataset: object) -> dict[str, Any]:
    if not isinstance(dataset, str) or dataset not in DATASET_SHAPES:
        raise _bad("dataset", f"must be one of {', '.join(DATASET_SHAPES)}, got {dataset!r}")
    shape, classes = DATASET_SHAPES[dataset]
    return {"input_shape": shape, "num_classes": classes}


def _shape_field(shape: object) -> dict[str, Any]:
    if not isinstance(shape, list) or not 1 <= len(shape) <= MAX_INPUT_DIMS or any(
            not is_int_at_least(v, 1) for v in shape):
        raise _bad("input_shape", f"must be a list of 1-{MAX_INPUT_DIMS} sizes, e.g. [3, 32, "
                                  f"32], got {shape!r}")
    return {"input_shape": tuple(shape)}


def _sizes_field(sizes: object) -> dict[str, Any]:
    if not isinstance(sizes, list) or not sizes or any(
            not is_number(s) or not 0 < s <= MAX_OBJECT_MB for s in sizes):
        raise _bad("sizes_mb", f"must be a non-empty list of sizes in (0, {MAX_OBJECT_MB:g}] "
                               f"MB, got {sizes!r}")
    return {"sizes_mb": tuple(sorted({float(s) for s in sizes}))}


def _channels_field(channels: object) -> dict[str, Any]:
    if channels is None:  # the profiling state machine passes null: its default
        return {}
    if not isinstance(channels, list) or any(c not in ("s3", "valkey") for c in channels):
        raise _bad("channels", f"must be a list of s3/valkey, got {channels!r}")
    return {"channels": tuple(dict.fromkeys(channels))}


# event field -> its check, returning the request fields it sets
_EVENT_FIELDS: dict[str, Callable[[object], dict[str, Any]]] = {
    "model": _model_field,
    "dataset": _dataset_field,
    "input_shape": _shape_field,
    "num_classes": lambda value: {"num_classes": _count("num_classes", value, 2)},
    "batches": lambda value: {"batches": _ints("batches", value, 1)},
    "warmup": lambda value: {"warmup": _count("warmup", value, 0)},
    "transfer_repeats": lambda value: {"transfer_repeats": _count("transfer_repeats", value, 1)},
    "repeats": lambda value: {"repeats": _count("repeats", value, 1)},
    "sizes_mb": _sizes_field,
    "channels": _channels_field,
}


# ---- memory -------------------------------------------------------------------------------

def reset_peak() -> bool:
    """Reset the resident high-water mark (Linux >= 4.0); False where that is not allowed."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_rss_mb() -> float:
    """The process's peak resident memory in MiB (the unit of Lambda memory sizes)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kB on Linux


# ---- measurements -------------------------------------------------------------------------

def training_step(model: str, num_classes: int, input_shape: tuple[int, ...]
                  ) -> Callable[[Any, Any], None]:
    """One iteration as the profiler times it (also ``python -m local instance-epoch``):
    forward, the cross-entropy loss, backward and an SGD step with momentum, on a model seeded
    like a run's."""
    import torch

    from fasdl.training.networks import build_seeded_model

    network = build_seeded_model(model, 0, num_classes, input_shape)
    optimizer = torch.optim.SGD(network.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(inputs: torch.Tensor, labels: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(network(inputs), labels).backward()
        optimizer.step()

    return step


def random_batch(generator: Any, batch: int, input_shape: tuple[int, ...],
                 num_classes: int) -> tuple[Any, Any]:
    """Random inputs of the workload's shape and random labels, from ``generator``."""
    import torch

    return (torch.randn(batch, *input_shape, generator=generator),
            torch.randint(0, num_classes, (batch,), generator=generator))


def measure_training(request: ProfileRequest, memory_mb: float) -> list[dict[str, Any]]:
    """One ``train`` record per batch size, ascending (see the module docstring)."""
    import torch

    from fasdl.training.networks import parameter_mb

    train = training_step(request.model, request.num_classes, request.input_shape)
    model_mb = parameter_mb(request.model, request.num_classes, request.input_shape)
    generator = torch.Generator().manual_seed(0)
    records = []
    for batch in request.batches:
        inputs, labels = random_batch(generator, batch, request.input_shape,
                                      request.num_classes)

        def step(x: torch.Tensor = inputs, y: torch.Tensor = labels) -> None:
            train(x, y)

        method = "VmHWM-reset" if reset_peak() else "VmHWM-monotonic"
        for _ in range(request.warmup):
            step()
        timings, cpu_times = [], []
        for _ in range(request.repeats):
            time.sleep(STEP_PAUSE_S)  # as a run's step follows its exchange's waits
            start, cpu = time.perf_counter(), time.process_time()
            step()
            timings.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu)
        records.append({
            "kind": "train", "memory_mb": memory_mb, "batch": batch,
            "seconds": statistics.median(timings), "cpu_s": statistics.median(cpu_times),
            "peak_mb": round(peak_rss_mb(), 3),
            "model": request.model, "model_mb": model_mb,
            "input_shape": list(request.input_shape), "num_classes": request.num_classes,
            "repeats": request.repeats, "threads": torch.get_num_threads(),
            "peak_method": method if _STATUS.exists() else "ru_maxrss",
        })
        del inputs, labels
    return records


# ---- results bucket -----------------------------------------------------------------------

def to_jsonl(records: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(record, sort_keys=True) + "\n" for record in records)


def run_profile(request: ProfileRequest, memory_mb: float, channels: Mapping[str, Channel],
                s3: Any, bucket: str, prefix: str = PROFILES_PREFIX) -> dict[str, Any]:
    """Measure, write the JSONL to ``bucket`` and return a small summary."""
    records = measure_training(request, memory_mb)
    transfer_prefix = profile_transfer_prefix(request.profile_id, memory_mb)
    for name, channel in channels.items():
        records += measure_transfers(channel, name, memory_mb, request.sizes_mb,
                                     request.transfer_repeats, transfer_prefix)
        records += measure_duplex(channel, name, memory_mb, duplex_size_mb(request.sizes_mb),
                                  request.transfer_repeats, transfer_prefix)
    key = profile_memory_key(prefix, request.profile_id, memory_mb)
    s3.put_object(Bucket=bucket, Key=key, Body=to_jsonl(records).encode(),
                  ContentType="application/x-ndjson")
    train = [r for r in records if r["kind"] == "train"]
    return {"profile_id": request.profile_id, "memory_mb": memory_mb, "bucket": bucket,
            "key": key, "records": len(records), "channels": sorted(channels),
            "seconds_per_batch": {str(r["batch"]): round(r["seconds"], 6) for r in train},
            "peak_mb": max(r["peak_mb"] for r in train)}


def collect(profile_id: object, memories: object, s3: Any, bucket: str,
            prefix: str = PROFILES_PREFIX) -> dict[str, Any]:
    """Concatenate the per-memory files into ``samples.jsonl``; a missing memory is an error."""
    if not isinstance(profile_id, str) or not _ID.fullmatch(profile_id):
        raise _bad("profile_id", f"must be 1-80 letters, digits, '_.-', got {profile_id!r}")
    if not isinstance(memories, list) or not memories or any(
            not is_number(m) or m <= 0 for m in memories):
        raise _bad("memories", f"must be a non-empty list of memory sizes, got {memories!r}")
    parts = []
    for memory in sorted(set(memories)):
        key = profile_memory_key(prefix, profile_id, memory)
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as error:  # NoSuchKey names the memory that did not report
            raise RuntimeError(f"no samples for {memory:g} MB at s3://{bucket}/{key}: "
                               f"{error}") from error
        parts.append(body.decode().rstrip("\n") + "\n")
    text = "".join(parts)
    key = profile_samples_key(prefix, profile_id)
    s3.put_object(Bucket=bucket, Key=key, Body=text.encode(),
                  ContentType="application/x-ndjson")
    return {"profile_id": profile_id, "bucket": bucket, "samples_key": key,
            "lines": text.count("\n"), "memories": sorted(set(memories)),
            "fetch": f"aws s3 cp s3://{bucket}/{key} samples.jsonl"}
