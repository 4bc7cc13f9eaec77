"""Re-planning the rest of a run (issue 42, step 2): with the refitted profiles, the cheapest
configuration that finishes the remaining iterations within the remaining deadline and budget.

What can change without a redeploy: W (up to the ceiling the stack was deployed for), K and the
per-role batches B^a, B^n **at the plan's global batch** G = K·B^a + (W−K)·B^n (so the training
recipe and the learning rate stay what was planned; B^n >= B^a, the alignment rule's order), and
the segment length (the cost model's, from the timeout). The memory M stays the deployed one:
a function's memory is part of the deployment. Every candidate is priced by the planner's own
cost model (planner/model/terms/cost_model.py's ``evaluate``) on a problem of the remaining
work: one pass of ``remaining.iterations`` at G, a warm cache (the run has been using it), the
deployed cache's ECPU/s maximum. The candidates are every (W, K, B^a) with B^a a multiple of
the batch step that gives an integer B^n: an exact search over that set.

Policies (``training.adaptive``):

* ``off``: never change.
* ``deadline``: change only when the current configuration, as measured, would miss the
  remaining deadline or budget; then the cheapest candidate that keeps both; when none does,
  stop, naming the best achievable time and its cost.
* ``cost``: as ``deadline``, and also change to a cheaper candidate while on course, when it
  keeps the deadline with :data:`DEADLINE_MARGIN` to spare and costs at most
  1/(1 + :data:`PAYBACK_MARGIN`) of continuing.

A change pays for itself: the candidate is priced with its cold start and first load (the
cost model charges one per run), the current configuration without them (its sandboxes are
warm). At most one decision per segment boundary, made by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from fasdl.contract.training import ADAPTIVE_POLICIES
from planner.model.inputs.problem import (
    MAX_PROBLEM_DEADLINE_S,
    FloatArray,
    IntArray,
    Problem,
    Violation,
)
from planner.model.terms.cost_model import Evaluation, evaluate

POLICIES = ADAPTIVE_POLICIES  # the plan's training.adaptive
PAYBACK_MARGIN = 0.10  # a change must save this share of continuing's cost
DEADLINE_MARGIN = 0.10  # ... and, under ``cost``, leave this share of the remaining deadline


class ReplanError(ValueError):
    """Inputs a re-plan cannot start from; the message names the field."""


@dataclass(frozen=True)
class Configuration:
    workers: int
    aggregators: int
    batch_aggregator: int
    batch_non_aggregator: int

    @property
    def global_batch(self) -> int:
        return (self.aggregators * self.batch_aggregator
                + (self.workers - self.aggregators) * self.batch_non_aggregator)


@dataclass(frozen=True)
class Remaining:
    iterations: int
    deadline_s: float
    budget_usd: float


@dataclass(frozen=True)
class Prospect:
    """A configuration's predicted time and cost for the remaining work."""

    configuration: Configuration
    time_s: float
    cost_usd: float
    segment_iterations: int


@dataclass(frozen=True)
class Decision:
    """``change``: run ``chosen`` from the next segment; ``stop``: nothing keeps the limits
    (``chosen`` is then the fastest candidate, for the message); else continue."""

    action: Literal["continue", "change", "stop"]
    reason: str
    current: Prospect
    chosen: Prospect | None


def candidates(global_batch: int, workers_max: int, batch_step: int
               ) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """Every (W, K, B^a, B^n) with W <= ``workers_max``, B^a a multiple of ``batch_step``,
    B^n >= B^a an integer and K·B^a + (W−K)·B^n = ``global_batch``."""
    found: list[tuple[IntArray, IntArray, IntArray, IntArray]] = []
    for w in range(1, workers_max + 1):
        ba = np.arange(batch_step, global_batch // w + 1, batch_step, dtype=np.int64)
        if ba.size == 0:
            continue  # B^n >= B^a: W·B^a <= G
        k, ba = (grid.ravel() for grid in np.meshgrid(np.arange(1, w + 1), ba))
        rest, others = global_batch - k * ba, w - k
        exact = np.where(others > 0, rest % np.maximum(others, 1) == 0, rest == 0)
        bn = np.where(others > 0, rest // np.maximum(others, 1), ba)
        keep = exact & (bn >= ba)
        found.append((np.full(int(keep.sum()), w, dtype=np.int64), k[keep], ba[keep],
                      bn[keep]))
    if not found:
        return tuple(np.zeros(0, dtype=np.int64) for _ in range(4))  # type: ignore[return-value]
    w_all, k_all, ba_all, bn_all = (np.concatenate(parts) for parts in zip(*found, strict=True))
    return w_all, k_all, ba_all, bn_all


def remaining_problem(problem: Problem, remaining: Remaining, global_batch: int,
                      memory_mb: int, cache_ecpu_max: float | None = None,
                      key_prefixes: int | None = None) -> Problem:
    """``problem`` as the rest of the run: one pass of the remaining iterations at G, at the
    deployed M, on the run's warm cache, within the remaining deadline, (Valkey) the deployed
    cache's ECPU/s maximum ``cache_ecpu_max`` and (S3) the run's ``key_prefixes`` (None:
    the problem's): the exchange's keys keep their labels through a change, so cleanups
    cover them."""
    if remaining.iterations < 1:
        raise ReplanError(f"remaining.iterations must be >= 1, got {remaining.iterations}")
    if remaining.deadline_s <= 0 or remaining.budget_usd <= 0:
        raise ReplanError("remaining.deadline_s and remaining.budget_usd must be > 0, got "
                          f"{remaining.deadline_s} and {remaining.budget_usd}")
    workload = problem.workload.with_workload(samples=remaining.iterations * global_batch)
    if cache_ecpu_max is not None:
        problem = replace(problem, max_cache_ecpu_per_s=cache_ecpu_max)
    if key_prefixes is not None:
        problem = replace(problem, max_exchange_key_prefixes=key_prefixes)
    return replace(problem, workload=workload, epochs=1,
                   deadline_s=max(1.0, remaining.deadline_s), memory_min_mb=memory_mb,
                   memory_max_mb=memory_mb, memory_step_mb=1, cache_warm=True,
                   max_global_batch=max(problem.max_global_batch, global_batch))


def _prospects(evaluation: Evaluation, warm: bool) -> tuple[FloatArray, FloatArray]:
    """Time and cost per configuration; ``warm``: without the cold start and its Lambda share
    (a configuration that continues)."""
    time, cost = evaluation.time_s, evaluation.cost_usd
    if not warm:
        return time, cost
    cold = evaluation.cold_start_s
    share = np.where(time > 0, cold / time, 0.0)
    return time - cold, cost - evaluation.cost_lambda_usd * share


def _prospect(evaluation: Evaluation, index: int, warm: bool) -> Prospect:
    time, cost = _prospects(evaluation, warm)
    configuration = Configuration(*(int(getattr(evaluation, name)[index]) for name in (
        "workers", "aggregators", "batch_aggregator", "batch_non_aggregator")))
    return Prospect(configuration, float(time[index]), float(cost[index]),
                    int(evaluation.segment_iterations[index]))


def decide(problem: Problem, current: Configuration, remaining: Remaining, *, policy: str,
           memory_mb: int, workers_max: int, bsp: bool = False,
           cache_ecpu_max: float | None = None, key_prefixes: int | None = None) -> Decision:
    """The decision at one segment boundary (module docstring); ``problem`` carries the
    refitted profiles (planner/adapt/online_calibration.py); ``cache_ecpu_max``: the deployed
    cache's ECPU/s maximum, and ``key_prefixes`` the S3 exchange's, which no candidate may
    pass."""
    if policy not in POLICIES:
        raise ReplanError(f"training.adaptive must be one of {', '.join(POLICIES)}, got "
                          f"{policy!r}")
    if not 1 <= current.workers <= workers_max:
        raise ReplanError(f"the current W = {current.workers} is outside 1-{workers_max}, "
                          "the ceiling the stack was deployed for")
    rest = remaining_problem(problem, remaining, current.global_batch, memory_mb,
                             cache_ecpu_max, key_prefixes)
    now = evaluate(rest, current.workers, memory_mb, current.aggregators,
                   current.batch_aggregator, current.batch_non_aggregator, bsp=bsp)
    continuing = _prospect(now, 0, warm=True)
    on_course = (continuing.time_s <= remaining.deadline_s
                 and continuing.cost_usd <= remaining.budget_usd)
    if policy == "off" or (on_course and policy == "deadline"):
        why = "policy off" if policy == "off" else "on course: the limits hold as measured"
        return Decision("continue", why, continuing, None)
    w, k, ba, bn = candidates(current.global_batch, workers_max, rest.batch_step)
    # the limits are judged here, on the remaining deadline and budget: evaluated without a
    # deadline, so that its violation masks none checked after it (the cache's maximum)
    every = evaluate(replace(rest, deadline_s=MAX_PROBLEM_DEADLINE_S), w, memory_mb, k, ba, bn,
                     bsp=bsp)
    time, cost = _prospects(every, warm=False)
    runnable = every.violation == Violation.NONE
    keeps = runnable & (time <= remaining.deadline_s) & (cost <= remaining.budget_usd)
    if on_course:  # policy cost: worth a change only with both margins
        keeps &= ((time <= remaining.deadline_s * (1 - DEADLINE_MARGIN))
                  & (cost * (1 + PAYBACK_MARGIN) <= continuing.cost_usd))
    if keeps.any():
        best = int(np.flatnonzero(keeps)[np.argmin(cost[keeps])])
        why = ("cheaper with the deadline kept" if on_course
               else "as measured the current configuration misses the limits")
        return Decision("change", why, continuing, _prospect(every, best, warm=False))
    if on_course:
        return Decision("continue", "on course; no change pays for itself", continuing, None)
    if not runnable.any():
        return Decision("stop", "no configuration within the ceiling can run", continuing,
                        None)
    fastest = int(np.flatnonzero(runnable)[np.argmin(time[runnable])])
    return Decision("stop", "no configuration within the ceiling keeps both limits",
                    continuing, _prospect(every, fastest, warm=False))
