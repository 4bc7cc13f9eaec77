"""Searches over (W, M, K, B^a, B^n): exact optimum, exhaustive reference, FasDL's heuristic.

The grid: M step 128 MB, all W, all K, B^a step 16 with W·B^a <= B^g_max (B^n >= B^a), and
B^n by ``bn_rule``: ``search`` (the default) every multiple of 16 from B^a up to the
global-batch and memory caps plus the alignment rule's own B^n; ``align`` the paper's
alignment rule and its caps alone (thesis 3-22: both roles finish together, which no longer
holds when aggregators keep their own shard local).

- ``exact``: branch and bound over the grid (planner/search/bounds.py,
planner/search/branch_and_bound.py),
  its memory bounded by chunks of configurations, not the grid.
- ``exhaustive``: the same grid walked one configuration at a time in plain Python loops,
  with no pruning beyond memory and the global batch. Slow and obviously correct: the
  reference the tests and the benchmark hold ``exact`` to.
- ``two_stage``: Algorithms 3.1/3.2 of the thesis (see planner/search/heuristic.py).

Ties are broken the same way everywhere: lower cost, then lower time, then fewer workers,
less memory, fewer aggregators, smaller B^a, smaller B^n.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Literal

import numpy as np

from planner.model.inputs.problem import VIOLATION_TEXT, Problem, Violation
from planner.model.terms.channels import channel_costs
from planner.model.terms.cost_model import (
    Evaluation,
    aligned_non_aggregator_batch,
    evaluate,
    misses_only_deadline,
)
from planner.model.terms.memory import role_max_batch
from planner.model.terms.pipelined import CHUNK_CHOICES, chunk_choices
from planner.search.bounds import BN_RULES
from planner.search.branch_and_bound import Objective, best_index, furthest_structural
from planner.search.branch_and_bound import search as bounded_search

Pattern = Literal["kreduce", "kreduce-pipelined", "scatterreduce", "allreduce"]
PATTERNS: tuple[str, ...] = ("kreduce", "kreduce-pipelined", "scatterreduce", "allreduce")
PIPELINED = "kreduce-pipelined"  # K-REDUCE in C chunks per shard (planner/model/terms/pipelined.py)
# plan's default: K-REDUCE phased (the paper's) or pipelined, whichever is cheaper
AUTO = "auto"
PLAN_PATTERNS: tuple[str, ...] = (AUTO, *PATTERNS)
SEARCHES: tuple[str, ...] = ("exact", "two-stage", "exhaustive")
# The channel's rates (NaN where the channel has none): what the cache's limits are sized
# from, the S3 request rates per key prefix, and what a fresh cache's ramp adds
CHANNEL_RATES = ("cache_ecpu_per_s_peak", "cache_ecpu_per_s_mean", "s3_key_prefixes",
                 "s3_requests_per_prefix_per_s", "s3_get_per_prefix_per_s",
                 "cache_ecpu_per_s_per_key", "cache_ramp_s", "cache_ramp_usd", "cache_wait_s")
__all__ = ["BN_RULES", "Choice", "Objective", "SearchResult", "best_index", "choice_from",
           "exact", "exhaustive", "frontier", "infeasibility"]


@dataclass(frozen=True)
class Choice:
    """One chosen configuration with its prediction."""

    workers: int
    memory_mb: int
    aggregators: int
    batch_aggregator: int
    batch_non_aggregator: int
    sync: str
    time_s: float
    cost_usd: float
    global_batch: int
    iterations_per_epoch: float
    segment_iterations: int
    segments: int
    breakdown: dict[str, float] = field(default_factory=dict)
    exchange_chunks: int = 1

    @property
    def pattern(self) -> str:
        if self.workers == 1:
            return "standalone"
        if self.exchange_chunks > 1:
            return PIPELINED
        if self.aggregators == self.workers:
            return "scatterreduce"
        if self.aggregators == 1 and self.sync == "bsp":
            return "allreduce"
        return "kreduce"

    def key(self) -> tuple[float, float, int, int, int, int, int, int]:
        return (self.cost_usd, self.time_s, self.workers, self.memory_mb, self.aggregators,
                self.batch_aggregator, self.batch_non_aggregator, self.exchange_chunks)


@dataclass(frozen=True)
class SearchResult:
    """The outcome of one search: a choice, or the constraint that made the problem infeasible."""

    method: str
    pattern: str
    choice: Choice | None
    reason: str | None
    evaluated: int
    elapsed_s: float
    violation: Violation = Violation.NONE

    @property
    def feasible(self) -> bool:
        return self.choice is not None


def choice_from(evaluation: Evaluation, index: int, exchange_chunks: int = 1) -> Choice:
    row = evaluation.row(index)
    breakdown = {
        "lambda_compute_usd": row["cost_lambda_usd"],
        "requests_usd": row["cost_requests_usd"],
        "exchange_usd": row["cost_exchange_usd"],
        "checkpoint_and_data_usd": row["cost_checkpoint_usd"],
        "storage_usd": row["cost_storage_usd"],
        "cache_minimum_usd": row["cost_cache_minimum_usd"],
        "train_aggregator_s": row["train_aggregator_s"],
        "train_non_aggregator_s": row["train_non_aggregator_s"],
        "upload_s": row["upload_s"],
        "aggregate_s": row["aggregate_s"],
        "download_s": row["download_s"],
        "iteration_s": row["iteration_s"],
        "cold_start_s": row["cold_start_s"],
        "load_s": row["load_s"],
        "checkpoint_s": row["checkpoint_s"],
    }
    breakdown.update({name: row[name] for name in CHANNEL_RATES if not math.isnan(row[name])})
    return Choice(
        workers=row["workers"], memory_mb=row["memory_mb"], aggregators=row["aggregators"],
        batch_aggregator=row["batch_aggregator"],
        batch_non_aggregator=row["batch_non_aggregator"],
        sync="bsp" if row["bsp"] else "hap", time_s=row["time_s"], cost_usd=row["cost_usd"],
        global_batch=row["global_batch"], iterations_per_epoch=row["iterations_per_epoch"],
        segment_iterations=row["segment_iterations"], segments=int(row["segments"]),
        breakdown=breakdown, exchange_chunks=exchange_chunks if row["workers"] > 1 else 1,
    )


def exact(problem: Problem, pattern: str = "kreduce", objective: Objective = "cost",
          bn_rule: str = "search") -> SearchResult:
    """The grid's optimum by branch and bound (planner/search/bounds.py): the exhaustive reference's
    result in bounded memory at any B^g_max the CLI allows. The pipelined pattern is the best
    of one K-REDUCE search per chunk count (planner.model.terms.pipelined.CHUNK_CHOICES); ``auto``
    the better of the phased and the pipelined K-REDUCE."""
    combined = _of_kreduce_searches(exact, problem, pattern, objective, bn_rule)
    if combined is not None:
        return combined
    started = time.perf_counter()
    best = bounded_search(problem, pattern, objective, bn_rule)
    if best.evaluation is not None:
        return SearchResult("exact", pattern, choice_from(best.evaluation, 0,
                                                          problem.exchange_chunks),
                            None, best.evaluated, time.perf_counter() - started)
    # Nothing feasible: the furthest check any configuration passes binds. The channel's
    # throughput is checked last: it binds when lifting it leaves a plan.
    throughput = _throughput_binds(problem, pattern, objective, bn_rule)
    if throughput is not None:
        violation, reason, lifted_evaluated = throughput
        return SearchResult("exact", pattern, None, reason, best.evaluated + lifted_evaluated,
                            time.perf_counter() - started, violation)
    # The fastest configuration that misses only the deadline says by how much it binds.
    fastest = bounded_search(problem, pattern, "time", bn_rule, relaxed=True)
    evaluated = best.evaluated + fastest.evaluated
    if fastest.evaluation is not None:
        reason = (f"{VIOLATION_TEXT[Violation.DEADLINE]} (deadline {problem.deadline_s:g} s; "
                  "the fastest configuration that meets every other constraint takes "
                  f"{float(fastest.evaluation.time_s[0]):.0f} s)")
        violation = Violation.DEADLINE
    else:
        furthest = furthest_structural(problem, pattern, bn_rule)
        if furthest is None:
            violation = Violation.MEMORY
            reason = (f"{VIOLATION_TEXT[Violation.MEMORY]}; no batch of {problem.batch_step} "
                      "fits any memory in the grid")
        else:
            violation, reason = furthest, VIOLATION_TEXT[furthest]
    return SearchResult("exact", pattern, None, reason, evaluated,
                        time.perf_counter() - started, violation)


def _throughput_binds(problem: Problem, pattern: str, objective: Objective, bn_rule: str
                      ) -> tuple[Violation, str, int] | None:
    """The channel's throughput limit with the best plan it rules out, when lifting it leaves
    one: (violation, reason, configurations evaluated); else None."""
    store = channel_costs(problem)
    unlimited = store.lifted(problem)
    if unlimited is None:
        return None
    lifted = bounded_search(unlimited, pattern, objective, bn_rule)
    if lifted.evaluation is None:
        return None
    return (store.rate_violation, store.limit_reason(problem, lifted.evaluation.rates),
            lifted.evaluated)


def _best_over_chunks(problem: Problem, run: Callable[..., SearchResult], method: str,
                      objective: Objective) -> SearchResult:
    """The pipelined pattern: one K-REDUCE search per chunk count a shard can hold, the best
    of them (ties: fewer chunks); infeasible with the first count's reason."""
    started = time.perf_counter()
    chunk_counts = chunk_choices(problem.workload.model_mb, problem.worker_limit())
    if not chunk_counts:
        return SearchResult(method, PIPELINED, None, "exchange-chunks: a shard of this model "
                            f"cannot be cut into {CHUNK_CHOICES[0]} chunks at "
                            f"K = {problem.worker_limit()}", 0, 0.0, Violation.MEMORY)
    results = [run(replace(problem, exchange_chunks=c), pattern="kreduce")
               for c in chunk_counts]
    evaluated = sum(result.evaluated for result in results)
    feasible = [result.choice for result in results if result.choice is not None]
    elapsed = time.perf_counter() - started
    if not feasible:
        first = results[0]
        return SearchResult(method, PIPELINED, None, first.reason, evaluated, elapsed,
                            first.violation)

    return SearchResult(method, PIPELINED, min(feasible, key=partial(_rank, objective=objective)),
                        None, evaluated, elapsed)


def _of_kreduce_searches(search: Callable[..., SearchResult], problem: Problem, pattern: str,
                         objective: Objective, bn_rule: str) -> SearchResult | None:
    """The patterns made of K-REDUCE searches (``auto``, the pipelined one); None otherwise."""
    run = partial(search, objective=objective, bn_rule=bn_rule)
    if pattern == AUTO:
        return _better_kreduce(partial(run, problem), objective)
    if pattern == PIPELINED:
        return _best_over_chunks(problem, run, search.__name__, objective)
    return None


def _rank(choice: Choice, objective: Objective) -> tuple[float, ...]:
    key = choice.key()
    return (key[1], key[0], *key[2:]) if objective == "time" else key


def _better_kreduce(run: Callable[..., SearchResult], objective: Objective) -> SearchResult:
    """``auto``: the phased and the pipelined K-REDUCE's optima, the better one (ties: the
    phased, with fewer requests); infeasible with the phased search's reason."""
    phased, pipelined = run(pattern="kreduce"), run(pattern=PIPELINED)
    evaluated = phased.evaluated + pipelined.evaluated
    elapsed = phased.elapsed_s + pipelined.elapsed_s
    best = phased
    if pipelined.choice is not None and (
            phased.choice is None
            or _rank(pipelined.choice, objective) < _rank(phased.choice, objective)):
        best = pipelined
    return replace(best, evaluated=evaluated, elapsed_s=elapsed)


def infeasibility(problem: Problem, evaluation: Evaluation) -> tuple[Violation, str]:
    """The binding constraint: the furthest any configuration got through the checks."""
    if len(evaluation) == 0:
        return Violation.MEMORY, (f"{VIOLATION_TEXT[Violation.MEMORY]}; no batch of "
                                  f"{problem.batch_step} fits any memory in the grid")
    furthest = Violation(int(evaluation.violation.max()))
    reason = VIOLATION_TEXT[furthest]
    late = misses_only_deadline(problem, evaluation)
    if furthest == Violation.DEADLINE and late.any():
        fastest = float(evaluation.time_s[late].min())
        reason += (f" (deadline {problem.deadline_s:g} s; the fastest configuration that "
                   f"meets every other constraint takes {fastest:.0f} s)")
    return furthest, reason


def _exhaustive_configs(problem: Problem, pattern: str, bn_rule: str
                       ) -> Iterator[tuple[int, int, int, int, int]]:
    step, cap = problem.batch_step, problem.max_global_batch
    for w in problem.worker_range():
        for memory in problem.memory_grid().tolist():
            max_batch = int(problem.workload.max_batch(memory))
            if pattern == "kreduce":
                ks = range(1, w + 1)
            else:
                ks = range(w, w + 1) if pattern == "scatterreduce" else range(1, 2)
            for k in ks:
                for ba in range(step, cap + 1, step):
                    if ba > max_batch or w * ba > cap:
                        break
                    for bn in _exhaustive_bn(problem, pattern, bn_rule, w, memory, k, ba):
                        yield w, memory, k, ba, bn


def _exhaustive_bn(problem: Problem, pattern: str, bn_rule: str, w: int, memory: int, k: int,
                   ba: int) -> list[int]:
    """B^n of one (W, M, K, B^a): B^a without non-aggregators; the alignment rule's; or every
    multiple of the step from B^a up to the global-batch and memory caps (at least B^a), and
    the rule's B^n too, so the search is never worse than the rule."""
    if pattern != "kreduce" or k == w:
        return [ba]
    aligned = int(aligned_non_aggregator_batch(problem, w, memory, k, ba))
    if bn_rule == "align":
        return [aligned]
    _, max_n = role_max_batch(problem.workload, memory, w, k, problem.channel,
                              problem.exchange_memory, problem.exchange_dtype)
    top = min((problem.max_global_batch - k * ba) // (w - k), int(max_n))
    values = list(range(ba, max(ba, top) + 1, problem.batch_step))
    return values if aligned in values else [*values, aligned]


def exhaustive(problem: Problem, pattern: str = "kreduce", objective: Objective = "cost",
               bn_rule: str = "search") -> SearchResult:
    """One configuration at a time; the reference for ``exact``."""
    combined = _of_kreduce_searches(exhaustive, problem, pattern, objective, bn_rule)
    if combined is not None:
        return combined
    started = time.perf_counter()
    best: Choice | None = None
    best_key: tuple[float, ...] | None = None
    furthest = Violation.NONE
    fastest_missing_deadline = math.inf
    count = 0
    bsp = pattern == "allreduce"
    for w, memory, k, ba, bn in _exhaustive_configs(problem, pattern, bn_rule):
        count += 1
        evaluation = evaluate(problem, [w], [memory], [k], [ba], [bn], bsp=bsp)
        violation = Violation(int(evaluation.violation[0]))
        if violation != Violation.NONE:
            furthest = max(furthest, violation)
            if misses_only_deadline(problem, evaluation)[0]:
                fastest_missing_deadline = min(fastest_missing_deadline,
                                               float(evaluation.time_s[0]))
            continue
        candidate = choice_from(evaluation, 0, problem.exchange_chunks)
        key = candidate.key()
        if objective == "time":
            key = (key[1], key[0], *key[2:])
        if best_key is None or key < best_key:
            best, best_key = candidate, key
    elapsed = time.perf_counter() - started
    if best is None:
        if count == 0:
            furthest = Violation.MEMORY
        reason = VIOLATION_TEXT[furthest]
        if furthest == Violation.DEADLINE:
            reason += (f" (deadline {problem.deadline_s:g} s; the fastest configuration that "
                       f"meets every other constraint takes {fastest_missing_deadline:.0f} s)")
        return SearchResult("exhaustive", pattern, None, reason, count, elapsed, furthest)
    return SearchResult("exhaustive", pattern, best, None, count, elapsed)


def frontier(problem: Problem, pattern: str, deadlines: np.ndarray,
             bn_rule: str = "search") -> np.ndarray:
    """Minimum cost for each deadline (NaN where nothing meets it): one exact search each, as
    the grid is too large to hold at once."""
    costs = []
    for deadline in np.asarray(deadlines, dtype=np.float64).tolist():
        result = exact(replace(problem, deadline_s=deadline), pattern, bn_rule=bn_rule)
        costs.append(math.nan if result.choice is None else result.choice.cost_usd)
    return np.array(costs, dtype=np.float64)
