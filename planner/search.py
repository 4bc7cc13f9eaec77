"""Searches over (W, M, K, B^a, B^n): exact optimum, exhaustive reference, FasDL's heuristic.

- ``exact``: every configuration of the grid (M step 128 MB, all W, B^a step 16, all K, B^n
  from the alignment rule and its caps) evaluated at once with numpy; the minimum wins.
  The only pruning is definitional: B^n >= B^a, so W·B^a <= B^g_max bounds B^a.
- ``exhaustive``: the same grid walked one configuration at a time in plain Python loops,
  with no pruning beyond memory and the global batch. Slow and obviously correct: the
  reference the tests and the benchmark hold ``exact`` to.
- ``two_stage``: Algorithms 3.1/3.2 of the thesis (see planner/heuristic.py).

Ties are broken the same way everywhere: lower cost, then lower time, then fewer workers,
less memory, fewer aggregators, smaller B^a.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from planner.model import (
    VIOLATION_TEXT,
    Evaluation,
    IntArray,
    Problem,
    Violation,
    aligned_non_aggregator_batch,
    evaluate,
)

Pattern = Literal["kreduce", "scatterreduce", "allreduce"]
Objective = Literal["cost", "time"]
PATTERNS: tuple[str, ...] = ("kreduce", "scatterreduce", "allreduce")
SEARCHES: tuple[str, ...] = ("exact", "two-stage", "exhaustive")


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

    @property
    def pattern(self) -> str:
        if self.workers == 1:
            return "standalone"
        if self.aggregators == self.workers:
            return "scatterreduce"
        if self.aggregators == 1 and self.sync == "bsp":
            return "allreduce"
        return "kreduce"

    def key(self) -> tuple[float, float, int, int, int, int]:
        return (self.cost_usd, self.time_s, self.workers, self.memory_mb, self.aggregators,
                self.batch_aggregator)


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


def choice_from(evaluation: Evaluation, index: int) -> Choice:
    row = evaluation.row(index)
    breakdown = {
        "lambda_compute_usd": row["cost_lambda_usd"],
        "requests_usd": row["cost_requests_usd"],
        "exchange_usd": row["cost_exchange_usd"],
        "checkpoint_and_data_usd": row["cost_checkpoint_usd"],
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
    return Choice(
        workers=row["workers"], memory_mb=row["memory_mb"], aggregators=row["aggregators"],
        batch_aggregator=row["batch_aggregator"],
        batch_non_aggregator=row["batch_non_aggregator"],
        sync="bsp" if row["bsp"] else "hap", time_s=row["time_s"], cost_usd=row["cost_usd"],
        global_batch=row["global_batch"], iterations_per_epoch=row["iterations_per_epoch"],
        segment_iterations=row["segment_iterations"], segments=int(row["segments"]),
        breakdown=breakdown,
    )


def candidate_triples(problem: Problem, pattern: str) -> tuple[IntArray, IntArray, IntArray]:
    """(W, K, B^a) of the grid for a pattern; B^a <= B^g_max / W since B^n >= B^a."""
    workers: list[np.ndarray] = []
    aggregators: list[np.ndarray] = []
    batches: list[np.ndarray] = []
    for w in problem.worker_range():
        grid = problem.batch_grid(problem.max_global_batch // w)
        if grid.size == 0:
            break
        if pattern == "kreduce":
            ks = np.arange(1, w + 1, dtype=np.int64)
        elif pattern == "scatterreduce":
            ks = np.array([w], dtype=np.int64)
        else:
            ks = np.array([1], dtype=np.int64)
        kk, bb = np.meshgrid(ks, grid, indexing="ij")
        workers.append(np.full(kk.size, w, dtype=np.int64))
        aggregators.append(kk.ravel())
        batches.append(bb.ravel())
    if not workers:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    return np.concatenate(workers), np.concatenate(aggregators), np.concatenate(batches)


def evaluate_grid(problem: Problem, pattern: str) -> Evaluation:
    """Every configuration of the pattern's grid, evaluated at once."""
    w, k, ba = candidate_triples(problem, pattern)
    memories = problem.memory_grid()
    mem = np.repeat(memories, w.size)
    w, k, ba = (np.tile(x, memories.size) for x in (w, k, ba))
    max_batch = problem.workload.max_batch(mem)
    keep = ba <= max_batch  # larger batches do not fit in memory: infeasible by definition
    w, k, ba, mem = w[keep], k[keep], ba[keep], mem[keep]
    bsp = pattern == "allreduce"
    bn = ba if pattern != "kreduce" else aligned_non_aggregator_batch(problem, w, mem, k, ba)
    return evaluate(problem, w, mem, k, ba, bn, bsp=bsp)


def best_index(evaluation: Evaluation, objective: Objective = "cost") -> int | None:
    """Index of the best feasible configuration under the shared tie-breaking order."""
    feasible = np.flatnonzero(evaluation.feasible)
    if feasible.size == 0:
        return None
    e = evaluation
    primary, secondary = ((e.cost_usd, e.time_s) if objective == "cost"
                          else (e.time_s, e.cost_usd))
    order = np.lexsort((e.batch_aggregator[feasible], e.aggregators[feasible],
                        e.memory_mb[feasible], e.workers[feasible], secondary[feasible],
                        primary[feasible]))
    return int(feasible[order[0]])


def exact(problem: Problem, pattern: str = "kreduce",
          objective: Objective = "cost") -> SearchResult:
    started = time.perf_counter()
    evaluation = evaluate_grid(problem, pattern)
    index = best_index(evaluation, objective)
    elapsed = time.perf_counter() - started
    if index is None:
        violation, reason = infeasibility(problem, evaluation)
        return SearchResult("exact", pattern, None, reason, len(evaluation), elapsed, violation)
    return SearchResult("exact", pattern, choice_from(evaluation, index), None,
                        len(evaluation), elapsed)


def infeasibility(problem: Problem, evaluation: Evaluation) -> tuple[Violation, str]:
    """The binding constraint: the furthest any configuration got through the checks."""
    if len(evaluation) == 0:
        return Violation.MEMORY, (f"{VIOLATION_TEXT[Violation.MEMORY]}; no batch of "
                                  f"{problem.batch_step} fits any memory in the grid")
    furthest = Violation(int(evaluation.violation.max()))
    reason = VIOLATION_TEXT[furthest]
    if furthest == Violation.DEADLINE:
        fastest = float(evaluation.time_s[evaluation.violation == Violation.DEADLINE].min())
        reason += (f" (deadline {problem.deadline_s:g} s; the fastest configuration that "
                   f"meets every other constraint takes {fastest:.0f} s)")
    return furthest, reason


def _exhaustive_configs(problem: Problem, pattern: str) -> Iterator[tuple[int, int, int, int]]:
    for w in problem.worker_range():
        for memory in problem.memory_grid().tolist():
            max_batch = int(problem.workload.max_batch(memory))
            if pattern == "kreduce":
                ks = range(1, w + 1)
            else:
                ks = range(w, w + 1) if pattern == "scatterreduce" else range(1, 2)
            for k in ks:
                for ba in range(problem.batch_step, problem.max_global_batch + 1,
                                problem.batch_step):
                    if ba > max_batch or w * ba > problem.max_global_batch:
                        break
                    yield w, memory, k, ba


def exhaustive(problem: Problem, pattern: str = "kreduce",
               objective: Objective = "cost") -> SearchResult:
    """One configuration at a time; the reference for ``exact``."""
    started = time.perf_counter()
    best: Choice | None = None
    best_key: tuple[float, ...] | None = None
    furthest = Violation.NONE
    fastest_missing_deadline = math.inf
    count = 0
    bsp = pattern == "allreduce"
    for w, memory, k, ba in _exhaustive_configs(problem, pattern):
        count += 1
        bn = (int(aligned_non_aggregator_batch(problem, w, memory, k, ba))
              if pattern == "kreduce" else ba)
        evaluation = evaluate(problem, [w], [memory], [k], [ba], [bn], bsp=bsp)
        violation = Violation(int(evaluation.violation[0]))
        if violation != Violation.NONE:
            furthest = max(furthest, violation)
            if violation == Violation.DEADLINE:
                fastest_missing_deadline = min(fastest_missing_deadline,
                                               float(evaluation.time_s[0]))
            continue
        candidate = choice_from(evaluation, 0)
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


def frontier(problem: Problem, pattern: str, deadlines: np.ndarray) -> np.ndarray:
    """Minimum cost for each deadline (NaN where nothing meets it), from one grid evaluation."""
    evaluation = evaluate_grid(problem, pattern)
    usable = (evaluation.violation == Violation.NONE) | (
        evaluation.violation == Violation.DEADLINE)
    times = evaluation.time_s[usable]
    costs = evaluation.cost_usd[usable]
    if times.size == 0:
        return np.full(deadlines.shape, np.nan)
    order = np.argsort(times, kind="stable")
    cheapest_so_far = np.minimum.accumulate(costs[order])
    positions = np.searchsorted(times[order], deadlines, side="right") - 1
    return np.where(positions >= 0, cheapest_so_far[np.maximum(positions, 0)], np.nan)
