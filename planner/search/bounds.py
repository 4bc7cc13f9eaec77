"""The exact search, bounded in memory and time: branch and bound over the planner's grid.

Evaluating the whole grid (M, W, K, B^a, B^n) at once took memory growing with (B^g_max/16)^2,
gigabytes at global batches in the thousands (measured: docs/results.md, "Measurements behind
design choices"), and is out of reach once B^n is searched too. The
grid is walked in four levels instead, best lower bound first:

1. blocks: a memory and up to 32 consecutive W (every K and batch of them);
2. triples (M, W, K) of the blocks that may still win;
3. for the B^n search (K-REDUCE, K < W): one B^a and a run of up to 64 B^n; every other
   triple's B^a (with its B^n: B^a, or the alignment rule's) form one leaf box;
4. the configurations of the boxes that may still win, evaluated by
planner.model.terms.cost_model.evaluate
   in chunks of at most 65,536.

A level is dropped when its lower bound is above the best configuration found so far (the
incumbent) or shows every configuration in it infeasible (deadline, Lambda timeout, caps). The
bounds are true lower bounds of evaluate()'s time and cost, deflated by EPS against rounding, so
no configuration at or below the optimum is ever dropped: the result, ties included, is the
exhaustive reference's (tests/planner/test_search.py holds it to that).

Bounds. With α = a/(M+m), c_a and c_n the communication seconds per iteration of an aggregator
and a non-aggregator, an iteration takes T >= α(B^a + b) + c_a and, with K < W,
T >= α(B^n + b) + c_n (under HAP and BSP alike). Weighting the two by K/W and (W−K)/W,
T >= α·G/W + αb + c̄ with c̄ = (K·c_a + (W−K)·c_n)/W, so the seconds per sample are
T/G >= α/W + (αb + c̄)/G_max. For one B^a, T/G over a run of B^n is lowest at an end of the run
or where the roles' times cross (exact: the ratio is monotone on each side of the crossing).
A run takes E·D·(T/G) + segments·(load + checkpoint) + cold start with
segments >= E·D·(T/G) / (the most a segment holds); its cost rises with its time, its
iterations and its segments, which the bounds feed to the model's own cost terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from planner.model.inputs.compute import seconds_per_sample
from planner.model.inputs.problem import FloatArray, IntArray, Problem
from planner.model.terms import cost_model
from planner.model.terms.channels import channel_costs
from planner.model.terms.cost_model import aligned_non_aggregator_batch
from planner.model.terms.exchange_time import aggregator_terms, non_aggregator_times
from planner.model.terms.memory import role_max_batch
from planner.model.terms.pipelined import pipelined_terms
from planner.model.terms.segments import segment_io_mb

BnRule = Literal["search", "align"]
BN_RULES: tuple[str, ...] = ("search", "align")
EPS = 1e-9          # relative slack: a bound within rounding of the incumbent is kept
W_BLOCK = 32        # consecutive W per block: few enough blocks, tight enough bounds
Y_RUN = 64          # B^n values per box of the B^n search
TRIPLE_GROUP = 256  # triples expanded into boxes at once (bounds memory, not results)
LEAF_CHUNK = 1 << 16  # configurations per evaluate() call: ~20 MB of arrays


@dataclass(frozen=True)
class Tables:
    """What every bound reads: per usable memory, and per (memory, K) with K - 1 as column."""

    problem: Problem
    pattern: str
    rule: str
    memory: IntArray      # memories where a batch fits and M + m > 0
    alpha: FloatArray     # a/(M + m), seconds per sample of training
    batch_max: IntArray   # B_M, the grid's largest batch at M
    floor_a: FloatArray   # aggregator comm's floor in W (0 phased; pipelined: its uploads)
    fixed_a: FloatArray   # aggregator comm without the (W−1) shard downloads
    per_peer: FloatArray  # seconds per peer shard an aggregator downloads
    non_agg: FloatArray   # a non-aggregator's comm
    segment_io: FloatArray  # load + checkpoint per segment
    cold_fixed: FloatArray  # the platform's cold start

    @property
    def work(self) -> float:
        """E·D, the samples a run trains."""
        return float(self.problem.epochs * self.problem.workload.samples)

    @property
    def g_cap(self) -> int:
        """No feasible global batch exceeds the cap or the dataset."""
        return min(self.problem.max_global_batch, self.problem.workload.samples)

    def cold(self, index: int | IntArray, workers: IntArray | int) -> FloatArray:
        """The cold start's floor: a partition S_d·max(B^a, B^n)/G is at least S_d/W."""
        size = self.problem.workload.dataset_mb / np.asarray(workers, dtype=np.float64)
        transfer = self.problem.platform.transfer_time("down", self.memory[index], size)
        return np.asarray(self.cold_fixed[index] + transfer, dtype=np.float64)


def tables(problem: Problem, pattern: str, rule: str) -> Tables:
    wl, platform = problem.workload, problem.platform
    memory = problem.memory_grid()
    batch_max = wl.max_batch(memory)
    usable = (memory + wl.m > 0) & (batch_max >= problem.batch_step)
    memory, batch_max = memory[usable], batch_max[usable]
    aggregators = np.arange(1, problem.worker_limit() + 1, dtype=np.float64)
    at = memory[:, None].astype(np.float64)
    load_mb, checkpoint_mb = segment_io_mb(problem, aggregators[None, :])
    return Tables(
        problem=problem, pattern=pattern, rule=rule, memory=memory,
        alpha=seconds_per_sample(memory, a=wl.a, m=wl.m), batch_max=batch_max,
        **_communication_tables(problem, at, aggregators[None, :]),
        segment_io=(platform.transfer_time("down", at, load_mb)
                    + platform.transfer_time("up", at, checkpoint_mb)),
        cold_fixed=platform.cold_start_s(memory))


def _communication_tables(problem: Problem, at: FloatArray, k: FloatArray
                          ) -> dict[str, FloatArray]:
    """c_a = max(floor_a, fixed_a + (W−1)·per_peer) and c_n per (memory, K), as evaluate()."""
    wl, platform = problem.workload, problem.platform
    if problem.exchange_chunks > 1:
        terms = pipelined_terms(platform, at, wl.model_mb, k, problem.exchange_chunks,
                                problem.upload_share)
        return {"floor_a": terms.floor_a, "fixed_a": terms.fixed_a,
                "per_peer": terms.per_peer, "non_agg": terms.non_aggregator}
    phased = aggregator_terms(problem, at, k)
    upload_n, download_n = non_aggregator_times(problem, at, k)
    return {"floor_a": np.zeros_like(phased.fixed), "fixed_a": phased.fixed,
            "per_peer": phased.per_peer, "non_agg": upload_n + download_n}


def run_cost(problem: Problem, memory: IntArray | int, workers: FloatArray | IntArray | int,
             aggregators: FloatArray | IntArray | int, worker_seconds: FloatArray,
             time_s: FloatArray, iterations: FloatArray, segments: FloatArray) -> FloatArray:
    """A floor of evaluate()'s cost: the model's own cost terms (cost_model.run_cost) fed floors
    of W·time, time, iterations and segments."""
    return np.asarray(sum(cost_model.run_cost(problem, memory, workers, aggregators,
                                              worker_seconds=worker_seconds, time_s=time_s,
                                              iterations=iterations, segments=segments)),
                      dtype=np.float64)


def _weighted_comm(t: Tables, index: int | slice, workers: NDArray[np.float64],
                   aggregators: IntArray) -> FloatArray:
    """c̄ = (K·c_a + (W−K)·c_n)/W = K·g + f_n + K·(f_a − g − f_n)/W for W > 1, 0 alone.

    With c_a's affine part only (its floor left out), so c̄ stays monotone in W: a floor."""
    col = aggregators - 1
    f_a, g, f_n = t.fixed_a[index, col], t.per_peer[index, col], t.non_agg[index, col]
    value = aggregators * g + f_n + aggregators * (f_a - g - f_n) / workers
    return np.asarray(np.where(workers > 1, value, 0.0), dtype=np.float64)


def _block_floors(t: Tables, low: int, high: int) -> tuple[FloatArray, FloatArray]:
    """Floors of T/G and of W·T/G over a block's (W, K, batches), per memory.

    For one K, c̄ and the aggregator's c_a are monotone in W, so the block's ends bound them;
    each K takes the larger of the balanced floor and the aggregator's alone (its T over the
    block's largest G), and the block the smallest over K."""
    step, b = t.problem.batch_step, t.problem.workload.b
    if t.pattern == "scatterreduce":  # K = W
        ks = np.arange(low, high + 1)
        first = last = ks.astype(np.float64)
    else:
        ks = np.arange(1, (1 if t.pattern == "allreduce" else high) + 1)
        first, last = np.maximum(low, ks).astype(np.float64), np.full(ks.shape, float(high))
    every = slice(None)
    comm = np.minimum(_weighted_comm(t, every, first, ks), _weighted_comm(t, every, last, ks))
    alpha = t.alpha[:, None]
    numerator = alpha * b + comm
    g_high = np.minimum(t.g_cap, high * t.batch_max).astype(np.float64)[:, None]
    g_low = np.minimum(t.g_cap, low * t.batch_max).astype(np.float64)[:, None]
    rising = numerator >= 0  # else the smallest global batch, step·W, is the floor's
    balanced = alpha / high + np.where(rising, numerator / g_high, numerator / (step * low))
    balanced_rate = alpha + np.where(rising, low * numerator / g_low, numerator / step)
    col = ks - 1
    comm_a = np.where(first > 1, np.maximum(t.floor_a[:, col], t.fixed_a[:, col]
                                            + (first - 1) * t.per_peer[:, col]), 0.0)
    aggregator = alpha * (step + b) + comm_a
    per_sample = np.maximum(balanced, aggregator / g_high).min(axis=1)
    rate = np.maximum(balanced_rate, low * aggregator / g_low).min(axis=1)
    return np.asarray(per_sample, dtype=np.float64), np.asarray(rate, dtype=np.float64)


def _blocks(problem: Problem) -> list[tuple[int, int]]:
    """(W_lo, W_hi) of each block; W = 1 has no communication, so it is a block alone."""
    limit = problem.worker_limit()
    starts = list(range(problem.min_workers, limit + 1, W_BLOCK))
    if problem.min_workers == 1:
        starts = [1, *range(2, limit + 1, W_BLOCK)]
    return [(low, min(low + W_BLOCK - 1, limit) if low > 1 else 1) for low in starts]


def block_bounds(t: Tables, relaxed: bool) -> tuple[IntArray, IntArray, IntArray, FloatArray,
                                                    FloatArray]:
    """(memory index, W_lo, W_hi, time floor, cost floor) of every block that may hold a
    feasible configuration."""
    p, step = t.problem, t.problem.batch_step
    columns: list[list[np.ndarray]] = [[], [], [], [], []]
    everywhere = np.arange(t.memory.size)
    for low, high in _blocks(p):
        if step * low > t.g_cap:
            break
        per_sample, rate = _block_floors(t, low, high)
        k_last = 1 if t.pattern == "allreduce" else high  # checkpoints shrink as K grows
        io = t.segment_io[:, k_last - 1]
        cold = t.cold(everywhere, high)
        g_high = np.minimum(t.g_cap, high * t.batch_max).astype(np.float64)
        time_lb = t.work * per_sample + io + cold
        worker_s = t.work * rate + low * (io + cold)
        cost = run_cost(p, t.memory, low, 1, worker_s, time_lb, t.work / g_high,
                        np.ones(t.memory.size))
        keep = np.ones(t.memory.size, dtype=bool) if relaxed else (
            time_lb * (1 - EPS) <= p.deadline_s)
        for column, values in zip(columns, (everywhere, np.full(t.memory.size, low),
                                            np.full(t.memory.size, high), time_lb, cost),
                                  strict=True):
            column.append(np.asarray(values)[keep])
    if not columns[0]:
        return (*(np.zeros(0, dtype=np.int64) for _ in range(3)),  # type: ignore[return-value]
                np.zeros(0), np.zeros(0))
    index, lows, highs, times, costs = (np.concatenate(c) for c in columns)
    return (index.astype(np.int64), lows.astype(np.int64), highs.astype(np.int64),
            times.astype(np.float64), costs.astype(np.float64))


@dataclass(frozen=True)
class Boxes:
    """Boxes of configurations at one memory, with floors of their time and cost.

    kind 0: B^a = step, 2·step, ..., ``x`` (B^n = B^a, or the alignment rule's);
    kind 1: B^a = ``x`` and B^n = ``y``, y + step, ... (``count`` of them)."""

    workers: IntArray
    aggregators: IntArray
    kind: IntArray
    x: IntArray
    y: IntArray
    count: IntArray
    time_lb: FloatArray
    cost_lb: FloatArray

    def leaves(self, step: int) -> IntArray:
        return np.where(self.kind == 0, self.x // step, self.count)

    def take(self, keep: NDArray[np.intp] | NDArray[np.bool_]) -> Boxes:
        return Boxes(*(getattr(self, name)[keep] for name in self.__dataclass_fields__))


def _pairs(pattern: str, low: int, high: int) -> tuple[IntArray, IntArray]:
    """(W, K) of W in [low, high] with the pattern's aggregators."""
    ws = np.arange(low, high + 1, dtype=np.int64)
    if pattern != "kreduce":
        return ws, ws.copy() if pattern == "scatterreduce" else np.ones_like(ws)
    w = np.repeat(ws, ws)
    first = np.repeat(np.cumsum(ws) - ws, ws)
    return w, np.arange(w.size, dtype=np.int64) - first + 1


def _finish(t: Tables, index: int, w: IntArray, k: IntArray, per_sample: FloatArray,
            g_max: FloatArray, iteration: FloatArray, relaxed: bool
            ) -> tuple[NDArray[np.bool_], FloatArray, FloatArray]:
    """(may be feasible, time floor, cost floor) from floors of T/G and T and G's ceiling."""
    p = t.problem
    cold = t.cold(index, w)
    io = t.segment_io[index, k - 1]
    budget = p.timeout_s - p.timeout_margin_s - cold - io  # a segment's most, at a cold start
    ok = iteration * (1 - EPS) <= budget
    with np.errstate(divide="ignore", invalid="ignore"):
        segments = np.ceil(t.work * per_sample * (1 - EPS) / np.where(ok, budget, 1.0))
    segments = np.where(ok, np.maximum(segments, 1.0), 1.0)
    time_lb = t.work * per_sample + segments * io + cold
    if not relaxed:
        ok &= time_lb * (1 - EPS) <= p.deadline_s
    with np.errstate(divide="ignore"):
        iterations = t.work / g_max
    cost_lb = run_cost(p, int(t.memory[index]), w, k, w * time_lb, time_lb, iterations,
                       segments)
    return ok, time_lb, cost_lb


@dataclass(frozen=True)
class Triples:
    workers: IntArray
    aggregators: IntArray
    x_top: IntArray         # the largest B^a that fits the aggregator and the grid
    max_n: IntArray         # the non-aggregator's B_M
    comm_a: FloatArray
    comm_n: FloatArray
    time_lb: FloatArray
    cost_lb: FloatArray


def triple_bounds(t: Tables, index: int, low: int, high: int, relaxed: bool) -> Triples:
    p, wl, step = t.problem, t.problem.workload, t.problem.batch_step
    w, k = _pairs(t.pattern, low, high)
    alpha = float(t.alpha[index])
    others = k < w
    comm_a = np.where(w > 1, np.maximum(t.floor_a[index, k - 1], t.fixed_a[index, k - 1]
                                        + (w - 1) * t.per_peer[index, k - 1]), 0.0)
    comm_n = np.where(others, t.non_agg[index, k - 1], 0.0)
    max_a, max_n = role_max_batch(wl, t.memory[index], w, k, p.channel, p.exchange_memory,
                                  p.exchange_dtype)
    x_top = np.minimum(np.minimum(p.max_global_batch // w, t.batch_max[index]), max_a)
    x_top = x_top // step * step
    with np.errstate(divide="ignore", invalid="ignore"):
        n_top = np.where(others, np.minimum(max_n, (t.g_cap - k * step) / np.maximum(w - k, 1)),
                         x_top)
        g_max = np.minimum(t.g_cap, k * x_top + (w - k) * np.maximum(max_n, 0)).astype(float)
        g_min = (step * w).astype(np.float64)
        ok = (x_top >= step) & (n_top >= step) & (g_min <= t.g_cap)
        numerator = alpha * wl.b + (k * comm_a + (w - k) * comm_n) / w
        balanced = alpha / w + np.where(numerator >= 0, numerator / g_max, numerator / g_min)
        # The roles may not balance (B^n held by memory): the aggregator alone bounds T, and
        # over B^a its T/G is monotone, so the smallest and largest B^a bound it.
        fill = (w - k) * np.maximum(max_n, 0)
        alone = [(alpha * (x + wl.b) + comm_a) / np.minimum(t.g_cap, k * x + fill)
                 for x in (np.full(w.shape, step), x_top)]
        per_sample = np.maximum(balanced, np.minimum(*alone))
    iteration = alpha * (step + wl.b) + np.maximum(comm_a, comm_n)
    fits, time_lb, cost_lb = _finish(t, index, w, k, per_sample, g_max, iteration, relaxed)
    keep = ok & fits & channel_costs(t.problem).within_rate_limit(t.problem, w,
                                                                  t.memory[index], k)
    return Triples(w[keep], k[keep], x_top[keep], max_n[keep], comm_a[keep], comm_n[keep],
                   time_lb[keep], cost_lb[keep])


def _ragged(counts: IntArray) -> tuple[IntArray, IntArray]:
    """(owner, position) of each element when owner i has counts[i] elements."""
    owner = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    start = np.repeat(np.cumsum(counts) - counts, counts)
    return owner, np.arange(owner.size, dtype=np.int64) - start


def expand(t: Tables, index: int, tri: Triples, relaxed: bool) -> Boxes:
    """The triples' boxes: one kind-0 box each, or for the B^n search runs of B^n per B^a."""
    searched = (tri.aggregators < tri.workers) & (t.pattern == "kreduce") & (t.rule == "search")
    fixed = np.flatnonzero(~searched)
    kind0 = Boxes(tri.workers[fixed], tri.aggregators[fixed], np.zeros(fixed.size, np.int64),
                  tri.x_top[fixed], tri.x_top[fixed], np.ones(fixed.size, np.int64),
                  tri.time_lb[fixed], tri.cost_lb[fixed])
    if not searched.any():
        return kind0
    p, step = t.problem, t.problem.batch_step
    owner, position = _ragged(tri.x_top[searched] // step)
    owner = np.flatnonzero(searched)[owner]
    w, k, x = tri.workers[owner], tri.aggregators[owner], (position + 1) * step
    y_top = np.minimum(tri.max_n[owner], (t.g_cap - k * x) / (w - k))
    on_grid = np.where(y_top >= x, (y_top - x) // step + 1, 0).astype(np.int64)
    run_owner, run = _ragged((on_grid + Y_RUN - 1) // Y_RUN)
    y = x[run_owner] + run * Y_RUN * step
    count = np.minimum(Y_RUN, on_grid[run_owner] - run * Y_RUN)
    # the alignment rule's B^n off the step grid, so the search is never worse than the rule
    aligned = aligned_non_aggregator_batch(p, w, t.memory[index], k, x)
    extra = np.flatnonzero((aligned % step != 0) & (aligned >= x) & (aligned <= y_top))
    owners = np.concatenate([owner[run_owner], owner[extra]])
    xs, ys = np.concatenate([x[run_owner], x[extra]]), np.concatenate([y, aligned[extra]])
    counts = np.concatenate([count, np.ones(extra.size, np.int64)])
    time_lb, cost_lb, ok = _run_bounds(t, index, tri, owners, xs, ys, counts, relaxed)
    kind1 = Boxes(tri.workers[owners], tri.aggregators[owners], np.ones(owners.size, np.int64),
                  xs, ys, counts, time_lb, cost_lb).take(ok)
    return Boxes(*(np.concatenate([getattr(kind0, n), getattr(kind1, n)])
                   for n in Boxes.__dataclass_fields__))


def _run_bounds(t: Tables, index: int, tri: Triples, owners: IntArray, x: IntArray,
                y: IntArray, count: IntArray, relaxed: bool
                ) -> tuple[FloatArray, FloatArray, NDArray[np.bool_]]:
    """Floors for one B^a and a run of B^n: T/G's exact minimum over the run (real B^n)."""
    wl, step = t.problem.workload, t.problem.batch_step
    w, k = tri.workers[owners], tri.aggregators[owners]
    alpha = float(t.alpha[index])
    aggregator = alpha * (x + wl.b) + tri.comm_a[owners]
    offset = alpha * wl.b + tri.comm_n[owners]
    y_low, y_high = y.astype(np.float64), (y + step * (count - 1)).astype(np.float64)
    crossing = np.clip((aggregator - offset) / alpha, y_low, y_high)

    def per_sample(batch: FloatArray) -> FloatArray:
        return np.maximum(aggregator, alpha * batch + offset) / (k * x + (w - k) * batch)

    lowest = np.minimum(np.minimum(per_sample(y_low), per_sample(y_high)), per_sample(crossing))
    iteration = np.maximum(aggregator, alpha * y_low + offset)
    ok, time_lb, cost_lb = _finish(t, index, w, k, lowest, k * x + (w - k) * y_high,
                                   iteration, relaxed)
    return time_lb, cost_lb, ok
