"""One worker's part of one segment: restore, train ``segment.iterations`` steps, checkpoint.

The sequence is the one tests/runtime/test_checkpoint.py drives in-process: seeded model →
KReduceWorker → partition (ranged reads, cached on local disk across warm invocations) →
restore from the manifest at ``start_iteration`` (unless 0) → one step per iteration →
save_worker → worker 0 commits the manifest. A :class:`TimeGuard` stops the worker before an
iteration it could not finish together with the checkpoint write (:class:`SegmentTooLong`), so
a Lambda is never killed half-way through writing its checkpoint.

Waits for peers are bounded (:func:`peer_wait_s`): a crashed peer makes the others fail
with ChannelTimeout within seconds, not at the Lambda timeout, and the state machine retries.

Test hook (fault tests only, never set in a deployment): ``FASDL_TEST_CRASH_AT_ITERATION=<n>``
makes the worker ``FASDL_TEST_CRASH_WORKER=<w>`` (every worker when unset) exit the process
with status 137, like an OOM kill, just before it trains global iteration ``n``, in attempts
below ``FASDL_TEST_CRASH_ATTEMPTS`` (default 1: only attempt 0, so the retry succeeds).
``FASDL_TEST_ITERATION_DELAY_S=<s>`` sleeps that long in every iteration (a slower model:
segment-length tests get a predictable time per iteration; the weights do not change).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from botocore.exceptions import ClientError

from fasdl.checkpoint import commit_manifest, load_manifest, restore_worker, save_worker
from fasdl.data import (
    BatchStream,
    DataCursor,
    RangeReader,
    load_partition,
    plan_partition,
    read_layout,
    read_rows,
    s3_range_reader,
    to_tensors,
)
from fasdl.environment import Settings
from fasdl.kreduce import KReduceWorker, StepStats
from fasdl.metrics import StepMetrics
from fasdl.models import build_seeded_model
from fasdl.plan import Plan
from fasdl.segments import check_deployment

CRASH_ITERATION_ENV = "FASDL_TEST_CRASH_AT_ITERATION"
CRASH_WORKER_ENV = "FASDL_TEST_CRASH_WORKER"
CRASH_ATTEMPTS_ENV = "FASDL_TEST_CRASH_ATTEMPTS"
DELAY_ENV = "FASDL_TEST_ITERATION_DELAY_S"
CHECKPOINT_BASE_S = 2.0  # a few small PUTs plus the committer's wait
CHECKPOINT_BYTES_PER_S = 20e6  # conservative S3 PUT throughput of one Lambda
EVAL_BATCH = 1024
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


class SegmentTooLong(RuntimeError):
    """Too little time is left for the next iteration plus the checkpoint write."""


class WorkerEventError(ValueError):
    """The worker's event does not match the contract; the message names the field."""


@dataclass(frozen=True)
class WorkerEvent:
    run_id: str
    plan_key: str
    index: int
    start_iteration: int
    iterations: int
    attempt: int
    worker: int

    @classmethod
    def parse(cls, event: Mapping[str, Any]) -> WorkerEvent:
        if event.get("action", "train") != "train":
            raise WorkerEventError(f"event field 'action': must be 'train', "
                                   f"got {event.get('action')!r}")
        segment = event.get("segment")
        if not isinstance(segment, dict):
            raise WorkerEventError("event field 'segment': must be an object")
        values: dict[str, Any] = {}
        for name, source, low in (("index", segment, 0), ("start_iteration", segment, 0),
                                  ("iterations", segment, 1), ("attempt", segment, 0),
                                  ("worker", event, 0)):
            value = source.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                where = "worker" if name == "worker" else f"segment.{name}"
                raise WorkerEventError(f"event field '{where}': must be an integer >= {low}, "
                                       f"got {value!r}")
            values[name] = value
        for name in ("run_id", "plan_key"):
            if not isinstance(event.get(name), str) or not event[name]:
                raise WorkerEventError(f"event field '{name}': must be a non-empty string")
            values[name] = event[name]
        return cls(**values)


class TimeGuard:
    """Predicts whether one more iteration and the checkpoint still fit before the deadline."""

    def __init__(self, remaining_s: Callable[[], float], margin_s: float,
                 checkpoint_s: float) -> None:
        self.remaining_s = remaining_s
        self.margin_s = margin_s
        self.checkpoint_s = checkpoint_s
        self.recent: list[float] = []

    def observe(self, iteration_s: float) -> None:
        self.recent = [*self.recent[-4:], iteration_s]

    def reserve_s(self) -> float:
        """Time kept back for the checkpoint and the margin (bounds every wait)."""
        return self.checkpoint_s + self.margin_s

    def check(self, iteration: int) -> None:
        predicted = max(self.recent, default=0.0)
        left = self.remaining_s()
        needed = predicted + self.reserve_s()
        if left < needed:
            raise SegmentTooLong(
                f"{left:.1f} s left before iteration {iteration}, but one iteration "
                f"(~{predicted:.1f} s) + checkpoint (~{self.checkpoint_s:.1f} s) + margin "
                f"({self.margin_s:.1f} s) need {needed:.1f} s; retry the segment shorter")


@dataclass
class SegmentResult:
    run_id: str
    worker: int
    segment: dict[str, int]
    iterations_done: int = 0
    losses: list[float] = field(default_factory=list)
    accuracy: float | None = None
    test_samples: int = 0
    times: dict[str, float] = field(default_factory=dict)
    bytes_up: int = 0
    bytes_down: int = 0
    resume_iteration: int | None = None

    def add(self, stats: StepStats) -> None:
        self.iterations_done += 1
        self.losses.append(stats.loss)
        for name in ("compute_s", "upload_s", "aggregate_s", "download_s", "idle_s"):
            self.times[name] = self.times.get(name, 0.0) + float(getattr(stats, name))
        self.bytes_up += stats.bytes_up
        self.bytes_down += stats.bytes_down

    def to_dict(self) -> dict[str, Any]:
        losses = self.losses
        return {
            "run_id": self.run_id, "worker": self.worker, "segment": self.segment,
            "iterations_done": self.iterations_done,
            "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None,
            "loss_mean": sum(losses) / len(losses) if losses else None,
            "accuracy": self.accuracy, "test_samples": self.test_samples,
            "time": {name: round(value, 6) for name, value in self.times.items()},
            "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
            "resume_iteration": self.resume_iteration,
        }


def _cached_labels(read_range: RangeReader, key: str, cache_dir: Path) -> np.ndarray:
    """All labels of a dataset (for the class count), cached like the partitions."""
    path = cache_dir / (key.replace("/", "_") + ".labels.npy")
    if path.exists():
        cached: np.ndarray = np.load(path, allow_pickle=False)
        return cached
    labels = read_rows(read_range, key, 0, read_layout(read_range, key).rows)
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.part")
    with partial.open("wb") as stream:
        np.save(stream, labels, allow_pickle=False)
    os.replace(partial, path)  # concurrent invocations never read a half-written file
    return labels


def _dataset_version(s3: Any, bucket: str, prefix: str) -> str:
    """A cache directory name that changes when the dataset objects are replaced."""
    tags = [s3.head_object(Bucket=bucket, Key=f"{prefix}/{name}.npy").get("ETag", "")
            for name in ("x", "y")]
    return hashlib.sha256(f"{bucket}/{prefix}:{tags}".encode()).hexdigest()[:16]


def _crash_hook(worker: int, iteration: int, attempt: int) -> None:
    target = os.environ.get(CRASH_ITERATION_ENV)
    if target is None or int(target) != iteration:
        return
    if attempt >= int(os.environ.get(CRASH_ATTEMPTS_ENV, "1")):
        return
    only = os.environ.get(CRASH_WORKER_ENV)
    if only is None or int(only) == worker:
        print(f"FASDL test hook: worker {worker} exits at iteration {iteration}",
              file=sys.stderr, flush=True)
        os._exit(137)


def peer_wait_s(settings: Settings, recent: list[float], left_s: float) -> float:
    """How long to wait for a peer's shard: long enough for staggered cold starts at the
    first iteration, a few slowest iterations after that, never past ``left_s``."""
    if recent:
        bound = max(settings.peer_wait_min_s, settings.peer_wait_factor * max(recent))
    else:
        bound = settings.peer_wait_start_s
    return max(1.0, min(bound, left_s))


def _evaluate(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(y), EVAL_BATCH):
            features, labels = to_tensors(x[start:start + EVAL_BATCH], y[start:start + EVAL_BATCH])
            correct += int((model(features).argmax(1) == labels).sum())
    return correct / max(1, len(y))


def _test_split(read_range: RangeReader, prefix: str,
                cache_dir: Path) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        rows = read_layout(read_range, f"{prefix}/test/x.npy").rows
    except ClientError as error:  # no test split: nothing to evaluate
        if error.response.get("Error", {}).get("Code") in _MISSING:
            return None
        raise
    split = load_partition(read_range, f"{prefix}/test", 0, rows, cache_dir)
    return split.x, split.y


def load_plan(s3: Any, bucket: str, key: str) -> Plan:
    try:
        text = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        raise WorkerEventError(f"event field 'plan_key': cannot read s3://{bucket}/{key}: "
                               f"{error}") from error
    return Plan.from_json(text.decode())


def write_result(s3: Any, settings: Settings, event: WorkerEvent,
                 result: Mapping[str, Any]) -> str:
    """The result as JSON where the local runner and finalize look for it."""
    key = settings.segment_result_key(event.run_id, event.index, event.attempt, event.worker)
    s3.put_object(Bucket=settings.results_bucket, Key=key,
                  Body=json.dumps(result, sort_keys=True).encode(),
                  ContentType="application/json")
    return key


def run_segment(settings: Settings, event: WorkerEvent, remaining_s: Callable[[], float],
                metrics: StepMetrics | None = None, s3: Any | None = None) -> dict[str, Any]:
    """Train one worker's part of one segment; returns the small JSON result."""
    began = time.perf_counter()
    s3 = s3 or settings.s3_client()
    store = settings.results_store(s3)
    plan = load_plan(s3, settings.results_bucket, event.plan_key)
    check_deployment(plan, settings.deployment)
    last = event.start_iteration + event.iterations
    if last > plan.total_iterations:
        raise WorkerEventError(f"event field 'segment.iterations': iterations "
                               f"[{event.start_iteration}, {last}) run past the plan's "
                               f"{plan.total_iterations}")
    if event.worker >= plan.deployment.workers:
        raise WorkerEventError(f"event field 'worker': must be < W={plan.deployment.workers}, "
                               f"got {event.worker}")
    read_range = s3_range_reader(s3, settings.datasets_bucket)
    prefix = plan.workload.dataset.rstrip("/")
    cache_dir = Path(settings.cache_dir) / _dataset_version(s3, settings.datasets_bucket, prefix)
    layout = read_layout(read_range, f"{prefix}/x.npy")
    if len(layout.row_shape) != 3:
        raise WorkerEventError(f"dataset {prefix}/x.npy must be N x C x H x W, "
                               f"got {layout.shape}")
    channels, height, width = layout.row_shape
    num_classes = max(2, int(_cached_labels(read_range, f"{prefix}/y.npy", cache_dir).max()) + 1)
    model = build_seeded_model(plan.workload.model, plan.training.seed, num_classes,
                               (channels, height, width))
    exchange = settings.exchange_channel()
    worker = KReduceWorker(plan, event.worker, exchange, model, event.run_id, event.attempt)
    result = SegmentResult(event.run_id, event.worker, {
        "index": event.index, "start_iteration": event.start_iteration,
        "iterations": event.iterations, "attempt": event.attempt})
    try:
        start, end = plan_partition(plan, event.worker)
        partition = load_partition(read_range, prefix, start, end, cache_dir)
        if event.start_iteration == 0:
            torch.manual_seed(plan.training.seed + event.worker)
            cursor = DataCursor()
        else:
            manifest = load_manifest(store, event.run_id, event.start_iteration)
            cursor = restore_worker(store, manifest, worker)
        stream = BatchStream.for_plan(plan, event.worker, partition, cursor)
        checkpoint_s = CHECKPOINT_BASE_S + 4 * worker.parameters.nbytes / CHECKPOINT_BYTES_PER_S
        guard = TimeGuard(remaining_s, settings.time_margin_s, checkpoint_s)
        result.times["load_s"] = time.perf_counter() - began
        delay_s = float(os.environ.get(DELAY_ENV, "0"))
        for iteration in range(event.start_iteration, last):
            guard.check(iteration)
            _crash_hook(event.worker, iteration, event.attempt)
            iteration_began = time.perf_counter()
            time.sleep(delay_s)
            # waits end before the reserve: a missing peer fails us, not the Lambda timeout
            worker.wait_timeout_s = peer_wait_s(
                settings, guard.recent,
                min(float(plan.deployment.timeout_s), remaining_s() - guard.reserve_s()))
            stats = worker.step(*to_tensors(*stream.next_batch()), iteration)
            guard.observe(time.perf_counter() - iteration_began)  # batch + delay included
            result.add(stats)
            if metrics is not None:
                metrics.record(stats)
        saved = time.perf_counter()
        result.resume_iteration = save_worker(store, event.run_id, event.attempt, worker,
                                              stream.cursor)
        if event.worker == 0:
            commit_manifest(store, event.run_id, last, event.attempt,
                            workers=plan.deployment.workers,
                            timeout_s=min(float(plan.deployment.timeout_s),
                                          max(1.0, remaining_s() - settings.time_margin_s)),
                            meta={"model": plan.workload.model,
                                  "num_classes": str(num_classes),
                                  "input_shape": f"{channels},{height},{width}",
                                  "parameters": str(worker.parameters.size)})
        result.times["checkpoint_s"] = time.perf_counter() - saved
        # worker 0 holds the merged model: cheap held-out accuracy, if time allows
        if event.worker == 0 and remaining_s() > 2 * settings.time_margin_s:
            evaluated = time.perf_counter()
            test = _test_split(read_range, prefix, cache_dir)
            if test is not None:
                result.accuracy = _evaluate(model, *test)
                result.test_samples = len(test[1])
            result.times["eval_s"] = time.perf_counter() - evaluated
    finally:
        worker.close()
        exchange.close()
    result.times["total_s"] = time.perf_counter() - began
    return result.to_dict()
