"""A checkpoint restored under another configuration: an adaptive run's change of W, K or the
per-role batches at the plan's global batch (issue 42, step 4; docs/architecture.md).

The checkpoint's manifest names the configuration that wrote it (:data:`CONFIGURATION` in its
meta, ``W,K,B^a,B^n``). When the plan a worker runs differs, every worker of the new
configuration restores by one written rule, the same on every attempt:

* **parameters**: the merged model of the last iteration (``model``). A HAP non-aggregator's
  own step of that iteration (``worker/i/params``) is dropped: its role and batch may change,
  and the merged model is what every worker of a BSP run holds anyway.
* **optimizer state** (momentum; AdamW's moments): worker i < W_old keeps its own; a new
  worker takes the old workers' mean (float64 sum in worker order, so bitwise the same on
  every restore). A removed worker's state is dropped. The model only ever sees the batch-
  weighted mean of the workers' updates (fasdl/exchange/kreduce.py), so per-worker buffers
  need no redistribution.
* **exchange state** (bfloat16 uploads): restarted as if the merged model had just been
  loaded: reference := merged, residual := 0, an aggregator's previous merged shard := the
  merged model's slice at its new shard bounds.
* **batch-norm buffers**: worker i < W_old keeps its own; a new worker the old workers' mean
  (integer buffers, the batches seen: worker 0's).
* **RNG**: torch's re-seeded from (seed, resume iteration, worker): a retried segment after a
  change draws what its first attempt drew.
* **data**: a change applies at an epoch's start only (the re-plan ends the segment before it
  there), so no sample is seen twice or skipped within an epoch: the cursor is the epoch's
  first batch, and the partitions are the new plan's (``Plan.partition_sizes``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import torch

from fasdl.contract.plan import Plan
from fasdl.exchange.channel.base import Channel
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.run.checkpoint import (
    CheckpointError,
    Manifest,
    array_from_bytes,
    buffer_arrays,
    read_object,
    restore_buffers,
)
from fasdl.training.data import DataCursor

CONFIGURATION = "configuration"  # the manifest meta entry: the writer's W,K,B^a,B^n
SEED_STRIDE = 1_000_003  # keeps (resume iteration, worker) seeds apart for W < this


def configuration_label(plan: Plan) -> str:
    t = plan.training
    return f"{plan.deployment.workers},{t.aggregators},{t.batch_aggregator}," \
           f"{t.batch_non_aggregator}"


def changed(manifest: Manifest, plan: Plan) -> bool:
    """Whether ``manifest`` was written under another configuration than ``plan``'s (a
    manifest from before the entry was written: only if its W differs)."""
    label = manifest.meta.get(CONFIGURATION)
    if label is None:
        return manifest.workers != plan.deployment.workers
    return label != configuration_label(plan)


def _mean_of_workers(manifest: Manifest, read: Callable[[int], np.ndarray]) -> np.ndarray:
    """The float64 mean of ``read(i)`` over the writer's workers, in worker order."""
    total = read(0).astype(np.float64)
    for old in range(1, manifest.workers):
        total += read(old)
    return total / manifest.workers


def _optimizer_state(store: Channel, manifest: Manifest, worker: KReduceWorker
                     ) -> dict[str, np.ndarray]:
    index = worker.worker_id
    state = {}
    for name, target in worker.optimizer_state.items():
        def read(old: int, name: str = name) -> np.ndarray:
            return array_from_bytes(read_object(store, manifest, f"worker/{old:04d}/{name}"))
        value = read(index) if index < manifest.workers else _mean_of_workers(manifest, read)
        state[name] = value.astype(target.dtype)
    return state


def _exchange_state(worker: KReduceWorker, merged: np.ndarray) -> dict[str, np.ndarray]:
    """bfloat16's state as after loading the merged model (module docstring)."""
    state = {}
    for name, target in worker.exchange_state.items():
        if name == "exchange_residual":
            state[name] = np.zeros_like(target)
        elif name == "exchange_previous":
            start = int(getattr(worker.codec, "own_start", 0))
            state[name] = np.array(merged[start:start + target.size], dtype=target.dtype)
        else:  # the reference
            state[name] = np.array(merged, dtype=target.dtype)
    return state


def _buffers(store: Channel, manifest: Manifest, index: int) -> dict[str, np.ndarray] | None:
    """Worker ``index``'s batch-norm buffers, or the old workers' mean for a new worker
    (integer buffers: worker 0's); None when the model has none."""
    def read(old: int) -> dict[str, np.ndarray]:
        return buffer_arrays(read_object(store, manifest, f"worker/{old:04d}/buffers"))
    if "worker/0000/buffers" not in manifest.objects:
        return None
    if index < manifest.workers:
        return read(index)
    first = read(0)
    floating = [name for name, value in first.items() if np.issubdtype(value.dtype, np.floating)]
    totals = {name: first[name].astype(np.float64) for name in floating}
    for old in range(1, manifest.workers):
        arrays = read(old)
        for name in floating:
            totals[name] += arrays[name]
    return {**first, **{name: (totals[name] / manifest.workers).astype(first[name].dtype)
                        for name in floating}}


def restore_reshaped(store: Channel, manifest: Manifest, worker: KReduceWorker,
                     plan: Plan) -> DataCursor:
    """Restore ``worker`` of ``plan`` from a checkpoint of another configuration (module
    docstring); returns its data cursor."""
    resume = manifest.resume_iteration
    per_epoch = plan.iterations_per_epoch
    if resume % per_epoch:
        raise CheckpointError(
            f"a change of configuration applies at an epoch's start only: the checkpoint "
            f"resumes at iteration {resume}, inside epoch {resume // per_epoch} "
            f"({per_epoch} iterations each)")
    merged = array_from_bytes(read_object(store, manifest, "model"))
    try:
        worker.restore(merged, _optimizer_state(store, manifest, worker),
                       last_iteration=manifest.last_iteration, merged=merged,
                       exchange_state=_exchange_state(worker, merged))
    except ValueError as error:
        raise CheckpointError(f"checkpoint does not fit this model: {error}") from error
    buffers = _buffers(store, manifest, worker.worker_id)
    if buffers is not None:
        restore_buffers(worker.model, buffers)
    torch.manual_seed(plan.training.seed + resume * SEED_STRIDE + worker.worker_id)
    return DataCursor(epoch=resume // per_epoch, position=0)


def describe(manifest: Manifest, plan: Plan) -> str:
    """The change, for the worker's log line."""
    return json.dumps({"from": manifest.meta.get(CONFIGURATION, f"W={manifest.workers}"),
                       "to": configuration_label(plan),
                       "resume_iteration": manifest.resume_iteration})
