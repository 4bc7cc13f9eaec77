"""The exact search's driver: walks planner/search/bounds.py's levels best bound first, evaluates
the boxes that may still win, and names the binding constraint when nothing is feasible.

Memory is bounded by the chunk of configurations evaluated at once (LEAF_CHUNK) and the boxes
of TRIPLE_GROUP triples, never by the grid: B^g_max = 65,536 with W up to 1,000 is searched
within the search's time and memory goals (measured: docs/results.md, "Planner search";
bench/planner_search.py --large).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

import numpy as np

from planner.model.inputs.problem import IntArray, Problem, Violation
from planner.model.terms.cost_model import (
    Evaluation,
    aligned_non_aggregator_batch,
    evaluate,
    misses_only_deadline,
)
from planner.search.bounds import (
    EPS,
    LEAF_CHUNK,
    TRIPLE_GROUP,
    Boxes,
    Tables,
    block_bounds,
    expand,
    tables,
    triple_bounds,
)

Objective = Literal["cost", "time"]
FIRST_CHUNK = 2048


def best_index(evaluation: Evaluation, objective: Objective = "cost",
               accepted: np.ndarray | None = None) -> int | None:
    """Index of the best accepted (default: feasible) configuration; ties: the other objective,
    then fewer workers, less memory, fewer aggregators, smaller B^a, smaller B^n."""
    usable = np.flatnonzero(evaluation.feasible if accepted is None else accepted)
    if usable.size == 0:
        return None
    e = evaluation
    primary, secondary = ((e.cost_usd, e.time_s) if objective == "cost"
                          else (e.time_s, e.cost_usd))
    order = np.lexsort(tuple(a[usable] for a in (
        e.batch_non_aggregator, e.batch_aggregator, e.aggregators, e.memory_mb, e.workers,
        secondary, primary)))
    return int(usable[order[0]])


@dataclass
class Best:
    """The incumbent: the best configuration so far, as a one-row Evaluation."""

    objective: Objective
    relaxed: bool
    key: tuple[float, ...] | None = None
    evaluation: Evaluation | None = None
    evaluated: int = 0

    @property
    def primary(self) -> float:
        return math.inf if self.key is None else self.key[0]

    def offer(self, problem: Problem, evaluation: Evaluation) -> None:
        accepted = evaluation.feasible
        if self.relaxed:  # the fastest configuration that misses only the deadline
            accepted = accepted | misses_only_deadline(problem, evaluation)
        index = best_index(evaluation, self.objective, accepted)
        if index is None:
            return
        e = evaluation
        primary, secondary = ((e.cost_usd, e.time_s) if self.objective == "cost"
                              else (e.time_s, e.cost_usd))
        key = tuple(float(a[index]) for a in (
            primary, secondary, e.workers, e.memory_mb, e.aggregators, e.batch_aggregator,
            e.batch_non_aggregator))
        if self.key is None or key < self.key:
            self.key = key
            self.evaluation = Evaluation(**{f.name: getattr(e, f.name)[index:index + 1]
                                            for f in fields(Evaluation)})

    def may_win(self, lower_bound: np.ndarray) -> np.ndarray:
        return np.asarray(lower_bound * (1 - EPS) <= self.primary)


def search(problem: Problem, pattern: str, objective: Objective, rule: str,
           relaxed: bool = False) -> Best:
    """The optimum over the grid (``relaxed``: the fastest configuration feasible but for the
    deadline), walking blocks best bound first until no bound can beat the incumbent."""
    t = tables(problem, pattern, rule)
    best = Best(objective, relaxed)
    index, low, high, time_lb, cost_lb = block_bounds(t, relaxed)
    bound = cost_lb if objective == "cost" else time_lb
    for block in np.argsort(bound, kind="stable"):
        if not best.may_win(bound[block]):
            break
        _search_block(t, int(index[block]), int(low[block]), int(high[block]), best)
    return best


def _search_block(t: Tables, index: int, low: int, high: int, best: Best) -> None:
    tri = triple_bounds(t, index, low, high, best.relaxed)
    bound = tri.cost_lb if best.objective == "cost" else tri.time_lb
    order = np.argsort(bound, kind="stable")
    for start in range(0, order.size, TRIPLE_GROUP):
        group = order[start:start + TRIPLE_GROUP]
        group = group[best.may_win(bound[group])]
        if group.size == 0:
            return  # sorted: no later triple can win either
        chosen = type(tri)(*(getattr(tri, f.name)[group] for f in fields(tri)))
        _walk(t, index, expand(t, index, chosen, best.relaxed), best)


def _walk(t: Tables, index: int, boxes: Boxes, best: Best) -> None:
    """Evaluate the boxes best bound first, a chunk at a time, while one may still win."""
    bound = boxes.cost_lb if best.objective == "cost" else boxes.time_lb
    order = np.argsort(bound, kind="stable")
    sizes = boxes.leaves(t.problem.batch_step)[order]
    ends = np.cumsum(sizes)
    position, chunk_size = 0, FIRST_CHUNK
    while position < order.size and best.may_win(bound[order[position]]):
        done = int(ends[position - 1]) if position else 0
        stop = max(position + 1, int(np.searchsorted(ends, done + chunk_size, side="right")))
        # small first chunks find an incumbent early; later ones amortize evaluate()'s calls
        chunk_size = min(2 * chunk_size, LEAF_CHUNK)
        chunk = order[position:stop]
        chunk = chunk[best.may_win(bound[chunk])]
        evaluation = _evaluate_leaves(t, index, boxes.take(chunk))
        best.evaluated += len(evaluation)
        best.offer(t.problem, evaluation)
        position = stop


def _evaluate_leaves(t: Tables, index: int, boxes: Boxes) -> Evaluation:
    p, step = t.problem, t.problem.batch_step
    sizes = boxes.leaves(step)
    owner = np.repeat(np.arange(sizes.size), sizes)
    position = np.arange(owner.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    kind, w, k = boxes.kind[owner], boxes.workers[owner], boxes.aggregators[owner]
    x = np.where(kind == 0, (position + 1) * step, boxes.x[owner])
    y = np.where(kind == 0, x, boxes.y[owner] + position * step)
    memory = np.full(w.shape, t.memory[index])
    if t.pattern == "kreduce" and t.rule == "align":
        y = aligned_non_aggregator_batch(p, w, memory, k, x)
    return evaluate(p, w, memory, k, x, y, bsp=t.pattern == "allreduce")


def grid_configurations(problem: Problem, pattern: str, rule: str, memory: int,
                        workers: range) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """(W, K, B^a, B^n) of the grid at one memory and some W that reach furthest through the
    checks: under the B^n search B^n = B^a (the least memory and global batch) and the rule's
    B^n; else every grid point."""
    step, cap = problem.batch_step, problem.max_global_batch
    top = int(problem.workload.max_batch(memory))
    rows: list[tuple[IntArray, IntArray, IntArray]] = []
    for w in workers:
        xs = np.arange(step, min(cap // w, top) + 1, step, dtype=np.int64)
        ks = {"kreduce": np.arange(1, w + 1), "scatterreduce": np.array([w]),
              "allreduce": np.array([1])}[pattern]
        kk, xx = np.meshgrid(ks.astype(np.int64), xs, indexing="ij")
        rows.append((np.full(kk.size, w, dtype=np.int64), kk.ravel(), xx.ravel()))
    if not rows:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    w_, k_, x_ = (np.concatenate(column) for column in zip(*rows, strict=True))
    if pattern != "kreduce":
        return w_, k_, x_, x_
    aligned = aligned_non_aggregator_batch(problem, w_, memory, k_, x_)
    if rule == "align":
        return w_, k_, x_, aligned
    return (np.concatenate([w_, w_]), np.concatenate([k_, k_]), np.concatenate([x_, x_]),
            np.concatenate([x_, aligned]))


def furthest_structural(problem: Problem, pattern: str, rule: str) -> Violation | None:
    """The furthest check any configuration passes when none fits even one iteration in the
    Lambda timeout (a rare failure: the grid is walked in chunks, stopping at the first that
    fits the caps); None when the grid is empty."""
    furthest: Violation | None = None
    limit = problem.worker_limit()
    for memory in problem.memory_grid().tolist():
        for first in range(problem.min_workers, limit + 1, 16):
            w, k, x, y = grid_configurations(problem, pattern, rule, memory,
                                             range(first, min(first + 16, limit + 1)))
            if w.size == 0:
                continue
            ev = evaluate(problem, w, np.full(w.shape, memory), k, x, y,
                          bsp=pattern == "allreduce")
            code = Violation(int(ev.violation.max()))
            furthest = code if furthest is None else max(furthest, code)
            if furthest >= Violation.LAMBDA_TIMEOUT:
                return furthest
    return furthest
