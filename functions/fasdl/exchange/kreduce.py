"""K-REDUCE: flat-parameter sharding, batch-weighted aggregation, HAP/BSP synchronisation.

Roles: workers 0..K−1 are aggregators (batch B^a), K..W−1 non-aggregators (batch B^n). Each
iteration every worker takes one step of its own optimizer (fasdl.training.optimizers), then:

* aggregator t uploads its shards j ≠ t, fetches shard t from every worker, averages them
  weighted by batch size (worker 0..W−1, float64 accumulation: bitwise reproducible),
  publishes merged shard t, then fetches the other merged shards of the same iteration (BSP);
* a non-aggregator uploads its K shards; under ``hap`` it then loads the merged shards of the
  previous iteration (staleness 1, nothing at l = 0) and, with ``training.hap_merge``
  ``reapply`` (the default), applies its own step of l again on top of them; with ``paper``
  it trains on from merged l−1 as it is (FasDL §IV-B: "non-aggregators retrieve the merged
  parameters of the previous iteration and immediately transition to the subsequent
  iteration"). Under ``bsp`` it loads those of this iteration.

Why re-apply: trained from merged l−1 as it is, every merge mixes fresh models with models
one merge behind, the model advances ~1/(1 + w_n) of the update per iteration (w_n: the
non-aggregators' batch share) and a fixed budget ends under-trained (docs/results.md,
"Convergence"). Merged l−1 plus its own step is its best guess of merged l; it costs one
optimizer update (fasdl.training.optimizers reapply), no memory.

Why model averaging after local momentum steps equals large-batch SGD with momentum (bsp):
every worker starts iteration l from the same parameters θ, so its update is
θ − lr·(μ·m_i + g_i) and the weighted mean is θ − lr·(μ·Σw_i·m_i + Σw_i·g_i). Both the
momentum recursion and the averaging are linear, so by induction Σw_i·m_i is exactly the
large-batch momentum buffer and Σw_i·g_i (w_i = B_i/B^g) is the gradient of the union-batch
mean loss. The per-worker buffers differ, but only their weighted mean ever reaches the
model, so the buffers need no averaging (weight decay is linear in θ and keeps this true;
the learning rate is the same function of the global iteration on every worker). AdamW is
not linear in the gradient: with it the run is local AdamW plus model averaging.

Frames a worker holds at once (uploads, downloads not yet folded, the merged shard) stay
within its cap (fasdl.exchange.inflight), the bound the planner's memory model assumes.

Cleanup keeps the store at O(2 iterations), at most 2·W·K keys: aggregator t deletes the
shards it consumed and its merged shard of l−2 *before* publishing merged t of l. Merged l−2
is dead by then because each worker uploads l only after loading merged l−2 (HAP) or l−1
(BSP); and once merged l is visible, no shard of l is left. The last two merged iterations
of a segment stay until worker 0 of the next epoch deletes its predecessors' keys
(fasdl.run.fencing.clean_dead_epochs); the last segment's, until finalize's delete_prefix.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import numpy as np
import torch
from torch import nn

from fasdl.contract.keys import merged_key, shard_key
from fasdl.contract.plan import Plan
from fasdl.exchange import inflight
from fasdl.exchange.channel.base import Channel
from fasdl.exchange.codec import build_codec
from fasdl.exchange.inflight import SCALED_AT_ONCE, Uploads, add_weighted, frame_size
from fasdl.exchange.pipeline import PipelinedExchange
from fasdl.exchange.shard_layout import chunk_bounds, shard_bounds
from fasdl.exchange.step_stats import StepStats as StepStats  # what step() returns
from fasdl.exchange.wire import decode_shard, encode_shard_into
from fasdl.training.losses import Loss, build_loss
from fasdl.training.optimizers import FlatParameters, build_optimizer

ParamsSource = Literal["merged", "own"]


class KReduceWorker:
    """One worker of a K-REDUCE run; the handler calls :meth:`step` once per iteration."""

    def __init__(self, plan: Plan, worker_id: int, channel: Channel, model: nn.Module,
                 run_id: str, epoch: int, *, loss_fn: Loss | None = None,
                 wait_timeout_s: float = 300.0, max_in_flight: int = inflight.MAX_IN_FLIGHT,
                 inflight_bytes: int | None = None) -> None:
        self.workers = plan.deployment.workers
        self.aggregators = plan.training.aggregators
        if not 0 <= worker_id < self.workers:
            raise ValueError(f"worker_id must be in [0, {self.workers}), got {worker_id}")
        self.plan = plan
        self.worker_id = worker_id
        self.channel = channel
        self.model = model
        self.run_id = run_id
        self.epoch = epoch  # namespaces keys and frames (fasdl.run.fencing)
        self.loss_fn = loss_fn if loss_fn is not None else build_loss(plan.workload)
        self.wait_timeout_s = wait_timeout_s
        self.is_aggregator = worker_id < self.aggregators
        self.stale_by_one = self._is_stale(worker_id)
        self.reapplies = self.stale_by_one and plan.training.hap_merge == "reapply"
        self.flat = FlatParameters(model)
        self.optimizer = build_optimizer(self.flat, plan)  # this worker's own state
        self.bounds = shard_bounds(self.flat.count, self.aggregators)
        batches = np.array([plan.batch_of(i) for i in range(self.workers)], dtype=np.float64)
        self.weights = batches / batches.sum()
        self._frame_run = f"{run_id}/{epoch}"  # frames of another epoch are rejected
        self._pool = ThreadPoolExecutor(max_in_flight, "kreduce") if max_in_flight > 1 else None
        self._max_in_flight = max_in_flight
        # frames held at once (fasdl.exchange.inflight): the planner's memory model assumes this cap
        if inflight_bytes is None:
            inflight_bytes = inflight.cap_bytes(plan.deployment.memory_mb, plan.workload.model_mb)
        self.budget = inflight.FrameBudget(inflight_bytes)
        self._read_copies = inflight.READ_COPIES.get(plan.deployment.channel, 1.0)
        # what uploads carry (fasdl.exchange.codec); every worker starts from the same model
        self.codec = build_codec(plan.training.exchange_dtype, self.flat.numpy(),
                                 self.bounds[worker_id] if self.is_aggregator else None)
        self.pipeline = self._build_pipeline(plan.training.exchange_chunks)
        # only an aggregator of the phased exchange sums whole shards: 8 bytes per element of
        # its own shard (the pipelined one sums a chunk at a time)
        # (made at its first sum, given back by release_step_buffers)
        self._accumulator = self._scratch = np.empty(0, dtype=np.float64)
        # merged parameters of one iteration handed in by a checkpoint restore (HAP reads
        # merged l−1 at l, which at a segment start lives in the checkpoint, not the store)
        self._restored_merged: tuple[int, np.ndarray] | None = None
        self._last_iteration: int | None = None
        self._idle_s = 0.0
        self._bytes_down = 0

    def _build_pipeline(self, chunks: int) -> PipelinedExchange | None:
        """The pipelined exchange when the plan asks for chunks (and there is an exchange)."""
        if chunks == 1 or self.workers == 1:
            return None
        if self._pool is None:
            raise ValueError("training.exchange_chunks > 1 needs max_in_flight >= 2")
        smallest = min(end - start for start, end in self.bounds)
        if chunks > smallest:
            raise ValueError(f"training.exchange_chunks: {chunks} chunks do not fit a shard of "
                             f"{smallest} parameters; allowed range is [1, {smallest}]")
        largest = max(end - start for start, end in self.bounds)
        cap = inflight.pipelined_cap_bytes(self.budget.cap, largest, self._read_copies)
        return PipelinedExchange(
            channel=self.channel, pool=self._pool, threads=self._max_in_flight,
            budget=inflight.FrameBudget(cap), weights=self.weights,
            parts=[chunk_bounds(start, end, chunks) for start, end in self.bounds],
            run_id=self.run_id, epoch=self.epoch, worker_id=self.worker_id,
            read_copies=self._read_copies, fetch=self._fetch,
            wait_timeout_s=self.wait_timeout_s, codec=self.codec,
            stale=[self._is_stale(peer) for peer in range(self.workers)])

    # ---- the iteration -----------------------------------------------------------------
    def step(self, batch_x: torch.Tensor, batch_y: torch.Tensor, iteration: int) -> StepStats:
        started = time.perf_counter()
        loss = self._local_step(batch_x, batch_y, iteration)
        computed = time.perf_counter()
        if self.pipeline is not None:
            return self._pipelined_exchange(iteration, loss, computed - started)
        self._idle_s, self._bytes_down = 0.0, 0
        bytes_up = self._upload(iteration)
        uploaded = time.perf_counter()
        idle_before_aggregate = self._idle_s
        if self.is_aggregator:
            self._aggregate(iteration)
        aggregated = time.perf_counter()
        idle_aggregate = self._idle_s - idle_before_aggregate
        if not self.stale_by_one:
            self._load_merged(iteration)
        elif iteration > 0:
            self._load_merged(iteration - 1)
            if self.reapplies:
                self.optimizer.reapply(iteration)
        downloaded = time.perf_counter()
        idle_download = self._idle_s - idle_before_aggregate - idle_aggregate
        self._last_iteration = iteration
        return StepStats(
            iteration=iteration, loss=loss, compute_s=computed - started,
            upload_s=uploaded - computed - idle_before_aggregate,
            aggregate_s=aggregated - uploaded - idle_aggregate,
            download_s=downloaded - aggregated - idle_download, idle_s=self._idle_s,
            bytes_up=bytes_up, bytes_down=self._bytes_down,
        )

    def _pipelined_exchange(self, iteration: int, loss: float, compute_s: float) -> StepStats:
        """The exchange of fasdl.exchange.pipeline. Its transfers overlap, so their time (less the
        folding and the waits for keys) is reported as ``download_s``; ``upload_s`` is 0."""
        assert self.pipeline is not None
        began = time.perf_counter()
        merged: int | None = iteration
        if self.stale_by_one:
            merged = iteration - 1 if iteration > 0 else None
        restored = None
        if self._restored_merged is not None and self._restored_merged[0] == merged:
            restored, merged, self._restored_merged = self._restored_merged[1], None, None
        totals = self.pipeline.run(self.flat.numpy(), iteration, merged)
        if restored is not None:  # merged l−1 of a segment's start lives in the checkpoint
            self.flat.numpy()[:] = restored
            self.codec.loaded(self.flat.numpy(), 0, self.flat.count)
        if self.reapplies and iteration > 0:
            self.optimizer.reapply(iteration)
        self._last_iteration = iteration
        elapsed = time.perf_counter() - began
        return StepStats(
            iteration=iteration, loss=loss, compute_s=compute_s, upload_s=0.0,
            aggregate_s=totals.fold_s,
            download_s=max(0.0, elapsed - totals.fold_s - totals.idle_s), idle_s=totals.idle_s,
            bytes_up=totals.bytes_up, bytes_down=totals.bytes_down)

    def _local_step(self, batch_x: torch.Tensor, batch_y: torch.Tensor, iteration: int
                    ) -> float:
        self.model.train()
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.model(batch_x), batch_y)
        loss.backward()
        self.optimizer.step(iteration)  # the schedule's lr of this global iteration
        return float(loss.detach())

    def _upload(self, iteration: int) -> int:
        values = self.flat.numpy()
        uploads = Uploads(self.budget, self._pool, self.channel.put)
        for shard, (start, end) in enumerate(self.bounds):
            if shard == self.worker_id:  # an aggregator keeps its own shard locally
                continue
            # buffers are reused across iterations while the budget keeps them
            frame = encode_shard_into(uploads.buffer(frame_size(end - start, self.codec.itemsize)),
                                      self.codec.frame_values(values, start, end),
                                      run=self._frame_run, iteration=iteration,
                                      worker=self.worker_id, shard=shard)
            uploads.send(shard_key(self.run_id, self.epoch, iteration, shard, self.worker_id),
                         frame)
        return uploads.finish()

    def _aggregate(self, iteration: int) -> None:
        if self.workers == 1:
            return  # a single worker's weighted mean is its own parameters
        shard = self.worker_id
        start, end = self.bounds[shard]
        count = end - start
        values = self.flat.numpy()
        total = self._sum_buffer(count)
        total.fill(0.0)
        others = [worker for worker in range(self.workers) if worker != shard]
        consumed = [shard_key(self.run_id, self.epoch, iteration, shard, worker)
                    for worker in others]
        frames = self._fetch_in_order(consumed, [count] * len(consumed), self.codec.itemsize)
        for worker in range(self.workers):  # fixed order: bitwise reproducible sums
            if worker == shard:
                add_weighted(total, values[start:end], self.weights[worker], self._scratch)
                continue
            part = decode_shard(next(frames), run=self._frame_run, iteration=iteration,
                                shard=shard, worker=worker, expected_count=count,
                                dtype=self.codec.wire_dtype)
            self.codec.fold_peer(total, part, self.weights[worker], start=start,
                                 stale=self._is_stale(worker), scratch=self._scratch)
            del part  # a view of the frame: gone before the next fetch, as the budget counts
        frames.close()
        values[start:end] = total  # float64 → float32, once
        self.codec.merged_own(values, start, end)
        if iteration >= 2:  # every worker has loaded merged l−2 before uploading l
            consumed.append(merged_key(self.run_id, self.epoch, iteration - 2, shard))
        # delete before publishing: once merged l is visible, nothing of l or l−2 is left
        self.channel.delete(consumed)
        publish = Uploads(self.budget, None, self.channel.put)
        merged = encode_shard_into(publish.buffer(frame_size(count)), values[start:end],
                                   run=self._frame_run, iteration=iteration, worker=shard,
                                   shard=shard)
        publish.send(merged_key(self.run_id, self.epoch, iteration, shard), merged)
        publish.finish()

    def _is_stale(self, worker: int) -> bool:
        """Whether ``worker``'s parameters lag a merge behind (a HAP non-aggregator)."""
        return self.plan.training.sync == "hap" and worker >= self.aggregators

    def _sum_buffer(self, count: int) -> np.ndarray:
        """The float64 accumulator of this aggregator's shard (and the scratch of one chunk)."""
        if self._accumulator.size < count:
            self._accumulator = np.empty(count, dtype=np.float64)
            self._scratch = np.empty(min(count, SCALED_AT_ONCE), dtype=np.float64)
        return self._accumulator[:count]

    def release_step_buffers(self) -> None:
        """Give back what only a step needs: the shard accumulator and the gradients.

        A segment's end writes model-sized checkpoint objects; without this they came on top
        of the training peak and took worker 0 past its memory size. A later step makes both
        again, with the same results (gradients are fresh each step anyway).
        """
        self._accumulator = self._scratch = np.empty(0, dtype=np.float64)
        self.optimizer.zero_grad()

    def _load_merged(self, iteration: int) -> None:
        values = self.flat.numpy()
        if self._restored_merged is not None and self._restored_merged[0] == iteration:
            values[:] = self._restored_merged[1]
            self._restored_merged = None
            self.codec.loaded(values, 0, self.flat.count)
            return
        if self.workers == 1:
            return
        # aggregators already hold their own merged shard
        shards = [shard for shard in range(self.aggregators) if shard != self.worker_id]
        frames = self._fetch_in_order(
            [merged_key(self.run_id, self.epoch, iteration, shard) for shard in shards],
            [self.bounds[shard][1] - self.bounds[shard][0] for shard in shards])
        for shard in shards:  # no name keeps a frame alive into the next fetch
            start, end = self.bounds[shard]
            values[start:end] = decode_shard(next(frames), run=self._frame_run,
                                             iteration=iteration, shard=shard, worker=shard,
                                             expected_count=end - start, dtype=np.float32)
            self.codec.loaded(values, start, end)
        frames.close()

    def _fetch_in_order(self, keys: list[str], counts: list[int], itemsize: int = 4
                        ) -> Generator[bytes]:
        """The values of ``keys`` (frames of ``counts`` values of ``itemsize`` bytes) in
        order, up to ``max_in_flight`` GETs at once and within the frame budget.

        Time the caller spends blocked on a key that was not there yet counts as idle.
        """
        deadline = time.monotonic() + self.wait_timeout_s
        sizes = [int(frame_size(count, itemsize) * self._read_copies) for count in counts]
        frames = inflight.fetch_in_order(self.budget, self._pool,
                                         lambda key: self._fetch(key, deadline), keys, sizes,
                                         self._max_in_flight)
        try:
            for data, idle in frames:
                self._idle_s += idle
                self._bytes_down += len(data)
                yield data
                del data  # before the next fetch: the budget has let this frame go
        finally:
            frames.close()

    def _fetch(self, key: str, deadline: float) -> tuple[bytes, float]:
        """The value of ``key`` and how long it had to be waited for."""
        data = self.channel.try_get(key)
        if data is not None:
            return data, 0.0
        waiting = time.perf_counter()
        data = self.channel.get(key, deadline)
        return data, time.perf_counter() - waiting

    def close(self, *, wait: bool = False) -> None:
        """Stop the fetch threads (the channel belongs to the caller); ``wait``: until the
        transfers already running end (each bounded by its own wait deadline)."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)

    # ---- state for segment checkpoints ---------------------------------------------------
    @property
    def parameters(self) -> np.ndarray:
        """The flat parameter vector (a view)."""
        return self.flat.numpy()

    @property
    def optimizer_state(self) -> dict[str, np.ndarray]:
        """The optimizer's vectors by name (views), each laid out like :attr:`parameters`."""
        return {name: vector.numpy() for name, vector in self.optimizer.state.items()}

    @property
    def exchange_state(self) -> dict[str, np.ndarray]:
        """The exchange codec's arrays by name (views; none for float32 uploads)."""
        return self.codec.state()

    @property
    def last_iteration(self) -> int | None:
        """The iteration of the last completed step (or restored checkpoint)."""
        return self._last_iteration

    @property
    def params_source(self) -> ParamsSource:
        """What this worker's parameters equal after its last step.

        ``merged``: the merged model of that iteration; ``own``: this worker's own (a HAP
        non-aggregator: merged l−1, plus its own step of l under ``reapply``; at l = 0 its
        step alone).
        """
        return "own" if self.stale_by_one else "merged"

    def restore(self, parameters: np.ndarray, optimizer_state: Mapping[str, np.ndarray], *,
                last_iteration: int, merged: np.ndarray | None,
                exchange_state: Mapping[str, np.ndarray] | None = None) -> None:
        """Resume after ``last_iteration`` from checkpointed state.

        ``merged`` is the merged model of ``last_iteration``; a HAP non-aggregator loads it
        during the next step instead of fetching it from the store.
        """
        state, codec = self.optimizer_state, self.exchange_state
        exchange_state = exchange_state or {}
        for provided, needed, what in ((optimizer_state, state, "optimizer"),
                                       (exchange_state, codec, "exchange")):
            if set(provided) != set(needed):
                raise ValueError(f"{what} state holds {sorted(provided)}, this worker needs "
                                 f"{sorted(needed)}")
        targets = {"parameters": self.flat.numpy(), **state, **codec}
        given = {"parameters": parameters, **optimizer_state, **exchange_state}
        for name, array in given.items():
            if array.shape != targets[name].shape:
                raise ValueError(f"{name} has shape {array.shape}, expected "
                                 f"{targets[name].shape}")
        for name, array in given.items():  # all checked first: nothing half-restored
            targets[name][:] = array
        self._last_iteration = last_iteration
        self._restored_merged = None
        if self.stale_by_one:
            if merged is None:
                raise ValueError("a HAP non-aggregator needs the merged model to resume")
            self._restored_merged = (last_iteration, np.array(merged, dtype=np.float32))
