"""FasDL's performance and cost model, vectorized over arrays of configurations.

Equations are FasDL's (IEEE TC 2025, Eq. 1-11) with the corrections of the thesis behind it
(its §2-3: the E factor, the alignment rule, the memory model; numbered below). Every quantity
below is a numpy array with one entry per configuration (W, M, K, B^a, B^n, sync):

- shard size            S_s = S_m / K                                        (thesis 3-1)
- throughput            tp = p(M)·(1 − exp(−t(M)·S))  per direction          (3-5, 3-6)
- upload                T_up = S_m / tp_up(S_s)                               (3-2)
- aggregation           T_agg = (W−1)·S_s/tp_down(S_s) + S_s/tp_up(S_s)      (3-3)
- download              T_down = S_m / tp_down(S_s)                           (3-4)
- aggregator comm       T_comm^a = T_up + T_agg + T_down                      (3-7)
- non-aggregator comm   T_comm^n = T_up + T_down                              (3-11)

  Our runtime (fasdl.exchange.kreduce) keeps an aggregator's own shard and merged shard in memory,
  so with ``own_shard_local`` (the default) an aggregator's T_up and T_down move (K−1)·S_s, not S_m;
  non-aggregators still move S_m each way; request and byte counts are the same either way.
  ``own_shard_local=False`` is the paper's equations as printed (the paper-reproduction tests);
  against local runs that form over-predicts an S3 iteration by far (measured: docs/results.md,
  "Measurements behind design choices").
- training              T_train(B) = a·(B + b)/(M + m)                        (3-12)
- alignment             B^n = B^a + T_agg·(M + m)/a, floored and clipped to the global-batch
                        budget and B_M (digest §3.7-5)                       (3-22)
- iterations            I = D / B^g,  B^g = K·B^a + (W−K)·B^n                 (3-14, 3-17)
- memory                B_M = floor((M − c − X)/k) per role, X its exchange buffers
                        (4-2; X = 0 with ``exchange_memory=False``; planner/model/terms/memory.py)

What the paper leaves out and a user pays for (documented additions):

- Lambda timeout: a segment (a cold start + load + its iterations + checkpoint write) must fit
  the function timeout minus a margin; the run takes ceil(E·I / iterations-per-segment)
  segments, each paying a load (checkpoint 2·S_m: merged model + optimizer state) and a
  checkpoint write, and one cold start (invocation_overhead_s, the torch load
  torch_load_cpu_s / min(M/1769, 1), unpack + import on one thread, docs/cold-start.md; then
  the partition S_d·max(B^a,B^n)/B^g, kept in /tmp): later segments run in warm sandboxes.
  Each segment also adds the platform's segment_overhead_s to the run's time (the steps and
  invocations between segments, billed to no worker; 0 unless an adaptive run measured it),
  and holds at most the problem's segment_iterations_max iterations.
- Lambda request fees, Step Functions state transitions, S3 requests of checkpoints, data
  loads and fencing (planner/model/terms/segment_requests.py), arm64 vs x86_64 GB-second prices.
- S3 exchange requests with the epoch factor E:  E·I·(PUT·K·W + GET·2K(W−1))   (3-24..3-26)
- ElastiCache Serverless (Valkey): ECPUs for S_m·(3W−2) MB per iteration (3-27) at 1 ECPU
  per KB, plus data stored (two iterations of shards, at least the metered minimum) in
  GB-hours for the run's duration. Datasets and checkpoints stay on S3 in this design, so
  the paper's 2·S_d term moves to the S3 request cost.
- W = 1 (standalone) has no communication and no exchange requests (digest §3.7-8).
- Keeping things (planner/model/terms/storage_cost.py): checkpoints and results on S3 Standard for
  the run, the noncurrent period of pruned checkpoints and a month after the run; on Valkey,
  the cache's ECPU/s minimum, metered whether used or not. Not in ``run_cost``, whose terms the
  search's bounds take as floors: leaving a cost out keeps them floors.
- A fresh ElastiCache Serverless cache's ramp (30,000 ECPU/s, doubling): the seconds it adds
  to the first iterations, at every worker's Lambda price (planner/model/terms/cache_ramp.py);
  none with ``cache_warm``. Or, where cheaper, the run waits before its first segment for the
  stack's pre-scaled ECPU/s minimum (``cache_prescale_s``, AWS: "within 60 minutes"): no
  ramp, the wait added to the run's time, its cache (the minimum and storage) billed for it,
  no Lambda running. planner/model/terms/cache_start.py chooses per configuration: the cheaper
  of the two that meets the deadline (the ramp when neither does, so the deadline binds).
- ElastiCache Serverless throughput: a Valkey plan's peak ECPU/s must stay within one cache's
  maximum, 15,000,000 (planner/model/terms/cache_throughput.py; Violation.CACHE_THROUGHPUT,
  checked after every other constraint); an S3 plan's peak requests per second spread over
  the fewest hashed key prefixes that keep each within S3's 3,500 PUT/DELETE and 5,500 GET,
  at most ``max_exchange_key_prefixes`` (planner/model/terms/s3_rates.py;
  Violation.S3_REQUEST_RATE).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from planner.model.inputs.problem import (
    FloatArray,
    IntArray,
    Problem,
    Violation,
)
from planner.model.inputs.profiles import WorkloadProfile
from planner.model.terms.cache_start import Priced, start_fresh_cache
from planner.model.terms.channels import ExchangeRates, channel_costs
from planner.model.terms.exchange_time import communication_times, iteration_times
from planner.model.terms.memory import memory_exceeded, role_max_batch
from planner.model.terms.pipelined import pipelined_terms
from planner.model.terms.request_ceiling import exchange_platform
from planner.model.terms.segment_requests import segment_request_cost
from planner.model.terms.segments import segment_load_and_checkpoint, segmenting
from planner.model.terms.storage_cost import storage_cost

# Step Functions transitions: start/trigger/finalize, and per segment the Map, the Choice and
# the loop bookkeeping plus two per worker iteration (task scheduled and succeeded).
SFN_FIXED_TRANSITIONS, SFN_TRANSITIONS_PER_SEGMENT, SFN_TRANSITIONS_PER_WORKER = 4, 4, 2


@dataclass(frozen=True)
class Evaluation:
    """Predicted time, cost and feasibility of each configuration (arrays, one per config)."""

    workers: IntArray
    memory_mb: IntArray
    aggregators: IntArray
    batch_aggregator: IntArray
    batch_non_aggregator: IntArray
    bsp: NDArray[np.bool_]
    global_batch: IntArray
    iterations_per_epoch: FloatArray
    train_aggregator_s: FloatArray
    train_non_aggregator_s: FloatArray
    upload_s: FloatArray
    aggregate_s: FloatArray
    download_s: FloatArray
    iteration_s: FloatArray
    cold_start_s: FloatArray
    load_s: FloatArray
    checkpoint_s: FloatArray
    segment_iterations: IntArray
    segments: FloatArray
    time_s: FloatArray
    cost_lambda_usd: FloatArray
    cost_requests_usd: FloatArray
    cost_exchange_usd: FloatArray
    cost_checkpoint_usd: FloatArray
    # keeping things: checkpoints and results on S3, the cache's ECPU/s minimum
    # (planner/model/terms/storage_cost.py)
    cost_storage_usd: FloatArray
    cost_cache_minimum_usd: FloatArray
    cost_usd: FloatArray
    violation: NDArray[np.int8]
    # Valkey's exchange in ECPU/s (planner/model/terms/cache_throughput.py); NaN on S3
    cache_ecpu_per_s_peak: FloatArray
    cache_ecpu_per_s_mean: FloatArray
    # S3's exchange: its hashed key prefixes P and each one's peak PUT/DELETE (the issue's
    # s3_requests_per_prefix_per_s) and GET requests per second (planner/model/terms/s3_rates.py);
    # NaN on Valkey
    s3_key_prefixes: FloatArray
    s3_requests_per_prefix_per_s: FloatArray
    s3_get_per_prefix_per_s: FloatArray
    # the busiest key's ECPU/s against one hash slot's ceiling; NaN on S3
    cache_ecpu_per_s_per_key: FloatArray
    # seconds and Lambda USD a fresh cache's ramp adds (planner/model/terms/cache_ramp.py; 0
    # with --cache-warm); NaN on S3
    cache_ramp_s: FloatArray
    cache_ramp_usd: FloatArray
    # seconds the run waits before its first segment for the pre-scaled minimum instead (0:
    # it ramps, or the cache is warm; module docstring); NaN on S3
    cache_wait_s: FloatArray

    @property
    def rates(self) -> ExchangeRates:
        """The exchange's throughput figures, as the channel's object reads them."""
        return ExchangeRates(self.cache_ecpu_per_s_peak, self.cache_ecpu_per_s_mean,
                             self.s3_key_prefixes, self.s3_requests_per_prefix_per_s,
                             self.s3_get_per_prefix_per_s, self.cache_ecpu_per_s_per_key)

    @property
    def feasible(self) -> NDArray[np.bool_]:
        return np.asarray(self.violation == Violation.NONE, dtype=bool)

    def __len__(self) -> int:
        return int(self.workers.shape[0])

    def row(self, index: int) -> dict[str, Any]:
        """One configuration as plain Python scalars."""
        return {f.name: _scalar(getattr(self, f.name)[index]) for f in fields(self)}


def aligned_non_aggregator_batch(problem: Problem, workers: ArrayLike, memory_mb: ArrayLike,
                                 aggregators: ArrayLike, batch_aggregator: ArrayLike) -> IntArray:
    """B^n from the alignment rule (thesis 3-22) and its caps (digest §3.7-5).

    B^n = floor(B^a + T_agg·(M + m)/a), then (with ``clip_bn``) clipped to the global-batch
    budget floor((B^g_max − K·B^a)/(W − K)) and to the non-aggregator's B_M. K = W: B^n = B^a.
    """
    w, mem, k, ba = (np.asarray(x, dtype=np.int64) for x in
                     (workers, memory_mb, aggregators, batch_aggregator))
    if problem.exchange_chunks > 1:  # the aggregator's extra seconds: c_a − c_n
        terms = pipelined_terms(exchange_platform(problem), mem, problem.workload.model_mb, k,
                                problem.exchange_chunks, problem.upload_share)
        lag = terms.aggregator(w) - terms.non_aggregator
    else:
        _, lag, _ = communication_times(problem, w, mem, k)
    wl = problem.workload
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        align = np.floor(ba + lag * (mem + wl.m) / wl.a)
        align = np.where(np.isfinite(align), align, 0.0)
        bn = align.astype(np.int64)
        if problem.clip_bn:
            others = np.maximum(w - k, 1)
            budget = (problem.max_global_batch - k * ba) // others
            _, max_n = role_max_batch(wl, mem, w, k, problem.channel, problem.exchange_memory,
                                      problem.exchange_dtype)
            bn = np.minimum(np.minimum(bn, budget), max_n)
    return np.where(k >= w, ba, bn)


def busy_s(workload: WorkloadProfile, memory_mb: ArrayLike, batch: ArrayLike,
           train_s: ArrayLike) -> FloatArray:
    """A role's training in the CPU bound: its training CPU at M's share, never below its
    T_train (planner/model/terms/client_cpu.py)."""
    return np.asarray(np.maximum(train_s, workload.train_cpu_time(batch, memory_mb)),
                      dtype=np.float64)


def run_cost(problem: Problem, memory_mb: IntArray | int,
             workers: FloatArray | IntArray | int, aggregators: FloatArray | IntArray | int, *,
             worker_seconds: FloatArray, time_s: FloatArray, iterations: FloatArray,
             segments: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """A run's cost in USD: (Lambda compute, requests and transitions, exchange, checkpoint
    and data requests). Each term rises with each input, so the search's bounds feed it floors
    of them (planner/search/bounds.py)."""
    prices = problem.prices
    w = np.broadcast_to(np.asarray(workers, dtype=np.int64), np.shape(time_s))
    k = np.broadcast_to(np.asarray(aggregators, dtype=np.int64), np.shape(time_s))
    compute = prices.lambda_mb_s(problem.arch) * np.asarray(memory_mb) * worker_seconds
    runs = np.asarray(segments, dtype=np.float64)
    transitions = (SFN_FIXED_TRANSITIONS
                   + runs * (SFN_TRANSITIONS_PER_SEGMENT + SFN_TRANSITIONS_PER_WORKER * w))
    requests = (runs * w + 2) * prices.lambda_request + transitions * prices.sfn_transition
    store = channel_costs(problem)
    exchange = store.exchange_cost(problem, w, k, iterations, time_s)
    checkpoint = segment_request_cost(prices, store.claim_puts_per_worker, w, k, runs, time_s)
    return (np.asarray(compute, dtype=np.float64), np.asarray(requests, dtype=np.float64),
            np.asarray(exchange, dtype=np.float64), np.asarray(checkpoint, dtype=np.float64))


def _configurations(*values: ArrayLike) -> list[IntArray]:
    """(W, M, K, B^a, B^n) as int64 arrays of one shape; B^n = B^a where every worker
    aggregates (K >= W)."""
    w, mem, k, ba, bn = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x, dtype=np.int64))
                                              for x in values))
    return [w, mem, k, ba, np.where(k >= w, ba, bn)]


def evaluate(problem: Problem, workers: ArrayLike, memory_mb: ArrayLike, aggregators: ArrayLike,
             batch_aggregator: ArrayLike, batch_non_aggregator: ArrayLike,
             bsp: ArrayLike = False) -> Evaluation:
    """Time, cost and the binding constraint of every configuration."""
    w, mem, k, ba, bn = _configurations(workers, memory_mb, aggregators, batch_aggregator,
                                        batch_non_aggregator)
    sync_bsp = np.broadcast_to(np.asarray(bsp, dtype=bool), w.shape)
    wl = problem.workload
    global_batch = k * ba + (w - k) * bn
    iterations = wl.samples / global_batch

    train_a, train_n = wl.train_time(ba, mem), wl.train_time(bn, mem)
    busy = busy_s(wl, mem, ba, train_a), busy_s(wl, mem, bn, train_n)
    store = channel_costs(problem)
    upload, aggregate, download, iteration = iteration_times(
        problem, w, mem, k, train_a, train_n, sync_bsp, busy,
        floors=store.slot_floors(problem, w, k))

    cold, load, checkpoint = segment_load_and_checkpoint(problem, mem, k, ba, bn, global_batch)
    # any segment may start cold (the first, a retry): each must fit one
    budget = problem.timeout_s - problem.timeout_margin_s - cold - load - checkpoint
    total_iterations = problem.epochs * iterations
    segment_iterations, segments = segmenting(budget, iteration, total_iterations,
                                              problem.segment_iterations_max)
    rates = store.rates(problem, w, mem, k, iteration)
    ramp = store.ramp_s(problem, w, k, training_s=total_iterations * iteration,
                        iteration_s=iteration, exchange_s=_exchange_s(iteration, upload,
                                                                      aggregate, download))
    working = total_iterations * iteration + segments * (load + checkpoint) + cold
    chosen, ramp, wait = _fresh_cache_start(
        RunShape(problem, w, mem, k, sync_bsp, total_iterations, segments, working,
                 segments * problem.platform.segment_overhead_s), rates,
        ramp)
    time = chosen.time_s
    (cost_lambda, cost_requests, cost_exchange, cost_checkpoint, cost_storage,
     cost_minimum) = chosen.parts
    cost = chosen.cost_usd

    violation = _violations(problem, w, mem, k, ba, bn, global_batch, segment_iterations, time)
    # the channel's throughput last: marked only where everything else holds
    violation = np.where(store.over_rate_limit(problem, rates) & (violation == Violation.NONE),
                         np.int8(store.rate_violation), violation).astype(np.int8)
    return Evaluation(
        workers=w, memory_mb=mem, aggregators=k, batch_aggregator=ba,
        batch_non_aggregator=bn, bsp=sync_bsp, global_batch=global_batch,
        iterations_per_epoch=iterations, train_aggregator_s=train_a,
        train_non_aggregator_s=train_n, upload_s=upload, aggregate_s=aggregate,
        download_s=download, iteration_s=iteration, cold_start_s=cold, load_s=load,
        checkpoint_s=checkpoint,
        segment_iterations=segment_iterations, segments=segments, time_s=time,
        cost_lambda_usd=cost_lambda, cost_requests_usd=cost_requests,
        cost_exchange_usd=cost_exchange, cost_checkpoint_usd=cost_checkpoint,
        cost_storage_usd=cost_storage, cost_cache_minimum_usd=cost_minimum, cost_usd=cost,
        violation=violation, cache_ramp_s=ramp,
        cache_ramp_usd=problem.prices.lambda_mb_s(problem.arch) * mem * w * ramp,
        cache_wait_s=wait,
        **{item.name: getattr(rates, item.name) for item in fields(rates)},  # same names
    )


@dataclass(frozen=True)
class RunShape:
    """What a run's cost terms take besides its seconds (:func:`_priced`)."""

    problem: Problem
    workers: IntArray
    memory_mb: IntArray
    aggregators: IntArray
    bsp: NDArray[np.bool_]
    iterations: FloatArray  # in all
    segments: FloatArray
    working_s: FloatArray  # training, loads, checkpoints and the cold start
    between_s: FloatArray  # the segments' overhead outside the workers (no worker bills it)


def _priced(run: RunShape, rates: ExchangeRates, ramp_s: FloatArray, wait_s: float) -> Priced:
    """The run's seconds and cost terms with a fresh store's ramp (it slows the first
    iterations) or a wait before the first segment (no Lambda runs during it)."""
    problem, w, mem, k = run.problem, run.workers, run.memory_mb, run.aggregators
    store = channel_costs(problem)
    time_s = run.working_s + run.between_s + ramp_s + wait_s
    parts = run_cost(problem, mem, w, k, worker_seconds=w * (run.working_s + ramp_s),
                     time_s=time_s, iterations=run.iterations, segments=run.segments)
    return Priced(time_s, (*parts, storage_cost(problem, w, k, run.bsp, run.segments, time_s),
                           store.minimum_cost(problem, w, k, rates, run.iterations, time_s)))


def _fresh_cache_start(run: RunShape, rates: ExchangeRates, ramp_s: FloatArray
                       ) -> tuple[Priced, FloatArray, FloatArray]:
    """The run priced as it meets a fresh store: ramping through ``ramp_s`` (the store's
    ramp, NaN where it has none) or waiting for its pre-scaled minimum, whichever
    planner/model/terms/cache_start.py chooses; with the ramp charged and the seconds waited,
    both NaN where the store has no ramp."""
    priced = partial(_priced, run, rates)
    ramp = np.nan_to_num(ramp_s)
    chosen, wait = start_fresh_cache(run.problem.deadline_s, priced(ramp, 0.0), priced,
                                     channel_costs(run.problem).prescale_wait_s(run.problem))
    none = np.isnan(ramp_s)
    return (chosen, np.where(none, np.nan, np.where(wait > 0, 0.0, ramp)),
            np.where(none, np.nan, wait))


def _exchange_s(iteration: FloatArray, upload: FloatArray, aggregate: FloatArray,
                download: FloatArray) -> FloatArray:
    """The exchange's share of an iteration, the part a throttled cache stretches
    (planner/model/terms/cache_ramp.py)."""
    return np.asarray(np.minimum(upload + aggregate + download, iteration), dtype=np.float64)


def misses_only_deadline(problem: Problem, evaluation: Evaluation) -> NDArray[np.bool_]:
    """Configurations that meet every constraint but the deadline: DEADLINE is checked last
    but for the channel's throughput, which a deadline-missing configuration may break too."""
    within = ~channel_costs(problem).over_rate_limit(problem, evaluation.rates)
    return np.asarray((evaluation.violation == Violation.DEADLINE) & within, dtype=bool)


def _violations(problem: Problem, w: IntArray, mem: IntArray, k: IntArray, ba: IntArray,
                bn: IntArray, global_batch: IntArray, segment_iterations: IntArray,
                time: FloatArray) -> NDArray[np.int8]:
    wl = problem.workload
    checks = [
        (Violation.DEADLINE, time > problem.deadline_s),
        (Violation.LAMBDA_TIMEOUT, segment_iterations < 1),
        (Violation.DATASET, global_batch > wl.samples),
        (Violation.ALIGNMENT, (k < w) & (bn < ba)),
        (Violation.GLOBAL_BATCH, global_batch > problem.max_global_batch),
        (Violation.MEMORY, memory_exceeded(wl, mem, w, k, ba, bn, problem.channel,
                                           problem.exchange_memory, problem.exchange_dtype)
         | (mem + wl.m <= 0)),
    ]
    violation = np.zeros(w.shape, dtype=np.int8)
    for code, broken in checks:  # last assignment wins: MEMORY binds before DEADLINE
        violation = np.where(broken, np.int8(code), violation)
    return violation


def _scalar(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
