"""One worker's part of one segment: restore, train ``segment.iterations`` steps, checkpoint.

The sequence is the one tests/runtime/test_checkpoint.py drives in-process: fence check and
claim of the worker in the segment's epoch (fasdl.run.fencing) → seeded model → KReduceWorker →
partition (ranged reads, cached on local disk across warm invocations) → restore from the
manifest epoch ``resume_epoch`` wrote at ``start_iteration`` (unless 0) → one step per iteration
→ save_worker → worker 0 commits the manifest → worker 0's held-out accuracy (and, for two
classes, Matthews correlation: CoLA's metric) if it fits the time left. A :class:`TimeGuard`
stops the worker before an iteration it could not finish together with the checkpoint write
(:class:`SegmentTooLong`), so a Lambda is never killed half-way through writing its checkpoint.
A worker whose epoch was superseded stops with WorkerFenced at its next fence check, writes
nothing more and deletes its dead epoch's exchange keys (what it wrote since that epoch was
cleaned included).

Waits for peers are bounded (:func:`peer_wait_s`): a crashed peer makes the others fail
with ChannelTimeout within seconds, not at the Lambda timeout, and the state machine retries.

The local fault tests inject crashes and delays through ``hooks`` (fasdl.run.fault_hooks), which
the handler parses once; a deployment's hooks do nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from botocore.exceptions import ClientError

from fasdl.aws.metrics import StepMetrics
from fasdl.aws.s3_errors import is_missing
from fasdl.contract import keys
from fasdl.contract.errors import DatasetError, WorkerFenced
from fasdl.contract.plan import Plan
from fasdl.contract.settings import Settings
from fasdl.contract.worker_event import WorkerEvent, WorkerEventError
from fasdl.exchange import stores
from fasdl.exchange.channel.base import Channel, ChannelTimeout
from fasdl.exchange.inflight import cap_bytes
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.run import reshape
from fasdl.run.checkpoint import commit_manifest, load_manifest, restore_worker, save_worker
from fasdl.run.fault_hooks import NO_FAULTS, FaultHooks
from fasdl.run.fencing import (
    Fence,
    claim_worker,
    clean_own_dead_epoch,
    start_dead_epoch_cleanup,
)
from fasdl.run.retention import RESUMED_FROM, resumed_from
from fasdl.run.role_times import role_of
from fasdl.run.run_state import check_deployment
from fasdl.run.segment_result import SegmentResult
from fasdl.run.time_budget import SegmentTooLong, TimeGuard, peer_wait_s
from fasdl.training.augment import (
    AugmentationError,
    check_rows,
    normalization_of,
    training_tensors,
)
from fasdl.training.classification import Confusion
from fasdl.training.data import (
    BatchStream,
    DataCursor,
    RangeReader,
    class_count,
    input_shape_of,
    load_partition,
    plan_partition,
    read_layout,
    read_rows,
    s3_range_reader,
)
from fasdl.training.evaluation import add_batch
from fasdl.training.export import evaluation_batch, export_objects
from fasdl.training.initial_weights import InitialWeightsError, apply_initial_weights
from fasdl.training.networks import build_seeded_model

CHECKPOINT_BASE_S = 2.0  # a few small PUTs plus the committer's wait
CHECKPOINT_BYTES_PER_S = 20e6  # conservative S3 PUT throughput of one Lambda
__all__ = ["SegmentTooLong", "TimeGuard", "WorkerEvent", "WorkerEventError", "peer_wait_s",
           "run_segment", "write_result"]

_log = logging.getLogger(__name__)


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
    tags = [s3.head_object(Bucket=bucket,
                           Key=keys.dataset_array_key(prefix, name)).get("ETag", "")
            for name in ("x", "y")]
    return hashlib.sha256(f"{bucket}/{prefix}:{tags}".encode()).hexdigest()[:16]


def _test_split(read_range: RangeReader, prefix: str,
                cache_dir: Path) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        rows = read_layout(read_range, keys.dataset_array_key(prefix, "x", test=True)).rows
    except ClientError as error:  # no test split: nothing to evaluate
        if is_missing(error):
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


@dataclass
class _Job:
    """What one invocation works with, built once by :func:`_prepare`."""

    plan: Plan
    read_range: RangeReader
    prefix: str
    cache_dir: Path
    meta: dict[str, str]
    model: torch.nn.Module
    worker: KReduceWorker
    stream: BatchStream | None = None
    initial_weights: str | None = None  # the key this invocation's model started from


def _check_event(plan: Plan, event: WorkerEvent) -> None:
    last = event.start_iteration + event.iterations
    if last > plan.total_iterations:
        raise WorkerEventError(f"event field 'segment.iterations': iterations "
                               f"[{event.start_iteration}, {last}) run past the plan's "
                               f"{plan.total_iterations}")
    if event.worker >= plan.deployment.workers:
        raise WorkerEventError(f"event field 'worker': must be < W={plan.deployment.workers}, "
                               f"got {event.worker}")


def _prepare(settings: Settings, event: WorkerEvent, plan: Plan, s3: Any,
             exchange: Channel) -> _Job:
    """The dataset's layout, the seeded model and this worker's K-REDUCE state."""
    read_range = s3_range_reader(s3, settings.datasets_bucket)
    prefix = plan.workload.dataset.rstrip("/")
    cache_dir = Path(settings.cache_dir) / _dataset_version(s3, settings.datasets_bucket, prefix)
    x_key = keys.dataset_array_key(prefix, "x")
    layout = read_layout(read_range, x_key)
    try:  # images C×H×W, or text 2×L (token ids; attention mask)
        input_shape = input_shape_of(f"dataset {x_key}", layout.dtype, layout.row_shape)
        check_rows(plan.training.augmentation, layout.row_shape, layout.dtype,
                   normalization_of(plan.workload))
    except (DatasetError, AugmentationError) as error:
        raise WorkerEventError(str(error)) from error
    labels = _cached_labels(read_range, keys.dataset_array_key(prefix, "y"), cache_dir)
    num_classes = class_count(labels)
    model = build_seeded_model(plan.workload.model, plan.training.seed, num_classes,
                               input_shape)
    started_from = (plan.workload.initial_weights if event.start_iteration == 0 else None)
    if started_from is not None:
        _load_initial_weights(model, s3, settings.datasets_bucket, started_from)
    worker = KReduceWorker(plan, event.worker, exchange, model, event.run_id, event.epoch,
                           inflight_bytes=cap_bytes(plan.deployment.memory_mb,
                                                    plan.workload.model_mb,
                                                    settings.exchange_inflight_mb))
    meta = {"model": plan.workload.model, "num_classes": str(num_classes),
            "input_shape": ",".join(str(n) for n in input_shape),
            "parameters": str(worker.parameters.size),
            "augmentation": plan.training.augmentation,
            "eval_batch": str(evaluation_batch(plan.batch_of(0)))}  # worker 0 evaluates
    return _Job(plan, read_range, prefix, cache_dir, meta, model, worker,
                initial_weights=started_from)


def _load_initial_weights(model: torch.nn.Module, s3: Any, bucket: str, key: str) -> None:
    """The run's first segment starts from the user's weights (later ones from checkpoints)."""
    try:
        data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        apply_initial_weights(model, data, f"s3://{bucket}/{key}")
    except InitialWeightsError as error:
        raise WorkerEventError(str(error)) from error
    except Exception as error:
        if is_missing(error):
            raise WorkerEventError(f"workload.initial_weights: s3://{bucket}/{key} not found "
                                   f"(upload it with the dataset)") from error
        raise


def _restore(job: _Job, store: Channel, event: WorkerEvent) -> None:
    """This worker's partition and data cursor; its state from the checkpoint (unless 0)."""
    start, end = plan_partition(job.plan, event.worker)
    partition = load_partition(job.read_range, job.prefix, start, end, job.cache_dir)
    if event.start_iteration == 0:
        torch.manual_seed(job.plan.training.seed + event.worker)
        cursor = DataCursor()
    else:
        manifest = load_manifest(store, event.run_id, event.start_iteration, event.resume_epoch)
        if reshape.changed(manifest, job.plan):  # an adaptive run's change (fasdl.run.reshape)
            _log.info("restoring under a new configuration: %s",
                      reshape.describe(manifest, job.plan))
            cursor = reshape.restore_reshaped(store, manifest, job.worker, job.plan)
        else:
            cursor = restore_worker(store, manifest, job.worker)
    job.stream = BatchStream.for_plan(job.plan, event.worker, partition, cursor)


def _train(job: _Job, event: WorkerEvent, settings: Settings, guard: TimeGuard, fence: Fence,
           result: SegmentResult, metrics: StepMetrics | None, hooks: FaultHooks) -> None:
    assert job.stream is not None
    timeout_s = float(job.plan.deployment.timeout_s)
    normalization = normalization_of(job.plan.workload)  # images, normalize: the dataset's
    for iteration in range(event.start_iteration, event.start_iteration + event.iterations):
        guard.check(iteration)
        fence.check()  # a superseded epoch stops before it writes this iteration's shards
        iteration_began = time.perf_counter()
        hooks.before_iteration(event.worker, iteration, event.attempt)  # tests only
        # waits end before the reserve: a missing peer fails us, not the Lambda timeout
        job.worker.wait_timeout_s = peer_wait_s(
            settings, guard.recent, min(timeout_s, guard.remaining_s() - guard.reserve_s()))
        batch = training_tensors(*job.stream.next_batch(), job.plan.training.augmentation,
                                 seed=job.plan.training.seed, worker=event.worker,
                                 iteration=iteration, normalization=normalization)
        cpu_before = time.process_time()
        try:
            stats = job.worker.step(*batch, iteration)
        except ChannelTimeout:
            # a newer epoch deletes this one's exchange keys, so a zombie waits in vain:
            # say it was superseded (WorkerFenced) rather than blame a peer
            fence.check(force=True)
            raise
        guard.observe(time.perf_counter() - iteration_began)  # batch + delay included
        result.add(stats)
        if metrics is not None:
            metrics.record(stats, cpu_s=time.process_time() - cpu_before)


def _checkpoint(job: _Job, store: Channel, event: WorkerEvent, settings: Settings,
                remaining_s: Callable[[], float], fence: Fence, result: SegmentResult) -> None:
    """This worker's part of the checkpoint; worker 0 then commits the manifest."""
    assert job.stream is not None
    saved = time.perf_counter()
    job.worker.release_step_buffers()  # the checkpoint's objects take their place
    # the run's end: worker 0's merged parameters with its own batch-norm statistics, a
    # model complete for inference, and its description (finalize publishes them as
    # model.safetensors and model.json)
    last = event.start_iteration + event.iterations == job.plan.total_iterations
    extra = (export_objects(job.model, job.meta, job.plan.workload)
             if event.worker == 0 and last else None)
    fence.check(force=True)
    result.resume_iteration = save_worker(store, event.run_id, event.epoch, job.worker,
                                          job.stream.cursor, extra_objects=extra)
    if event.worker == 0:
        fence.check(force=True)
        commit_manifest(store, event.run_id, event.start_iteration + event.iterations,
                        event.epoch, workers=job.plan.deployment.workers,
                        timeout_s=min(float(job.plan.deployment.timeout_s),
                                      max(1.0, remaining_s() - settings.time_margin_s)),
                        meta={**job.meta, RESUMED_FROM: resumed_from(event.start_iteration,
                                                                     event.resume_epoch),
                              reshape.CONFIGURATION: reshape.configuration_label(job.plan)})
    result.times["checkpoint_s"] = time.perf_counter() - saved


def _evaluate_in_time(job: _Job, time_left_s: Callable[[], float],
                      result: SegmentResult) -> None:
    """Worker 0 holds the merged model: its held-out accuracy (and MCC for two classes),
    only if it fits the time left.

    The first chunk is predicted from the training step (a forward pass costs less than a
    step); the slowest chunk seen predicts the next. Out of time: both stay None.
    """
    began, batch = time.perf_counter(), int(job.meta["eval_batch"])
    trained = result.iterations_done * job.plan.batch_of(job.worker.worker_id)
    per_sample_s = result.times.get("compute_s", 0.0) / max(1, trained)
    if time_left_s() < per_sample_s * batch:
        return
    test = _test_split(job.read_range, job.prefix, job.cache_dir)
    if test is None:
        return
    x, y = test
    job.model.eval()
    confusion, slowest = Confusion(int(job.meta["num_classes"])), per_sample_s * batch
    for start in range(0, len(y), batch):
        if time_left_s() < slowest:
            result.times["eval_s"] = time.perf_counter() - began
            return
        chunk_began = time.perf_counter()
        add_batch(confusion, job.model, x[start:start + batch], y[start:start + batch],
                  job.plan.training.augmentation,
                  normalization=normalization_of(job.plan.workload))
        slowest = max(slowest, time.perf_counter() - chunk_began)
    result.accuracy, result.test_samples = confusion.correct / max(1, len(y)), len(y)
    result.mcc = confusion.mcc()
    result.times["eval_s"] = time.perf_counter() - began


def run_segment(settings: Settings, event: WorkerEvent, remaining_s: Callable[[], float],
                metrics: StepMetrics | None = None, s3: Any | None = None, *,
                invocation_id: str | None = None,
                hooks: FaultHooks = NO_FAULTS) -> dict[str, Any]:
    """Train one worker's part of one segment; returns the small JSON result.

    ``invocation_id`` (the Lambda request id) claims the worker in the segment's epoch, so a
    second invocation of the same worker stops (fasdl.run.fencing)."""
    began = time.perf_counter()
    s3 = s3 or stores.s3_client(settings)
    store = stores.results_store(settings, s3)
    fence = Fence(store, event.run_id, event.epoch, check_every_s=settings.fence_check_s)
    fence.check(force=True)  # a late start of a superseded epoch stops before anything else
    plan = load_plan(s3, settings.results_bucket, event.plan_key)
    check_deployment(plan, settings.deployment)
    _check_event(plan, event)
    exchange = stores.exchange_channel(settings, plan.training.exchange_key_prefixes)
    result = SegmentResult(event.run_id, event.worker, event.segment(),
                           role=role_of(event.worker, plan.training.aggregators),
                           batch=plan.batch_of(event.worker), workload=plan.workload.name,
                           workers=plan.deployment.workers)
    cleanup: threading.Thread | None = None
    try:
        claim_worker(exchange, event.run_id, event.epoch, event.worker,
                     invocation_id or uuid.uuid4().hex)
        if event.worker == 0:
            cleanup = start_dead_epoch_cleanup(exchange, event.run_id, event.epoch)
        job = _prepare(settings, event, plan, s3, exchange)
        result.initial_weights = job.initial_weights
        try:
            _restore(job, store, event)
            checkpoint_s = (CHECKPOINT_BASE_S
                            + 4 * job.worker.parameters.nbytes / CHECKPOINT_BYTES_PER_S)
            guard = TimeGuard(remaining_s, settings.time_margin_s, checkpoint_s)
            result.times["load_s"] = time.perf_counter() - began
            _train(job, event, settings, guard, fence, result, metrics, hooks)
            _checkpoint(job, store, event, settings, remaining_s, fence, result)
            if event.worker == 0:
                _evaluate_in_time(job, lambda: remaining_s() - settings.time_margin_s, result)
        except WorkerFenced:
            job.worker.close(wait=True)  # its transfers land before the cleanup, not after
            clean_own_dead_epoch(exchange, event.run_id, event.epoch)
            raise
        finally:
            job.worker.close()
    finally:
        if cleanup is not None:  # before the channel it uses closes; bounded by the segment
            cleanup.join(max(0.0, remaining_s() - settings.time_margin_s))
        result.throttled_retries = exchange.throttled_retries
        exchange.close()
    result.times["total_s"] = time.perf_counter() - began
    return result.to_dict()
