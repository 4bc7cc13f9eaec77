"""FasDL's two-stage heuristic (thesis Algorithms 3.1/3.2) and the provisioning baselines.

Two-stage, as the thesis describes it (digest §3.1-3.3, resolutions of §3.7):
  stage 1 (Alg. 3.1): for δ, minimise ScatterReduce cost (K = W, B^n = B^a) subject to
    T <= T_max/δ and W·B^a <= δ·B^g_max; loops W ascending, M descending from 10240 MB in
    steps of 128, B^a ascending from B_lower = ceil16(b·γ_min/(1−γ_min)) in steps of 16.
    Early stop: when no B^a at a memory meets the time bound, smaller memories cannot
    either, so move to the next W. ``literal_early_stop`` reproduces the printed
    pseudo-code instead, which stops at the first B^a that misses the bound.
  stage 2 (Alg. 3.2): for each δ in {0.6..1.0}, take stage 1's (W, M, B^a) and try every K,
    with B^n from the alignment rule; keep the cheapest feasible one. K runs 1..W as in the
    thesis, or W..1 as in the paper (``k_descending``); only ties differ.

Baselines under the same model:
  λDNN-style (peer digest §2.3): memory ascending; per memory the closed-form worker lower
    bound of λDNN Eq. 15 from its simplified time model, then W ascending with
    b_l = b_l^f (γ >= 0.8) or B^g_max/W, first feasible-and-cheaper W per memory. Evaluated
    as a central-aggregator BSP run (K = 1, B^n = B^a), the serverless stand-in for its PS.
  standalone: one function at the largest memory, the cheapest feasible batch.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from planner.model.inputs.problem import VIOLATION_TEXT, Problem, Violation
from planner.model.terms.cost_model import (
    Evaluation,
    aligned_non_aggregator_batch,
    evaluate,
    misses_only_deadline,
)
from planner.search.searches import Choice, SearchResult, best_index, choice_from, infeasibility

DELTAS: tuple[float, ...] = (0.6, 0.7, 0.8, 0.9, 1.0)
DEFAULT_GAMMA_MIN = 0.7  # the paper: "empirically set between 0.6 and 0.8"
LAMBDA_DNN_GAMMA = 0.8   # λDNN's b_l^f: the batch reaching >= 80 % of the peak training rate


def batch_lower_bound(problem: Problem, gamma_min: float) -> int:
    """B_lower = b/(1/γ_min − 1), rounded up to the batch grid (thesis 3-34, digest §3.7-2)."""
    if not 0.0 < gamma_min < 1.0:
        raise ValueError(f"gamma_min must be in (0, 1), got {gamma_min}")
    raw = problem.workload.b * gamma_min / (1.0 - gamma_min)
    step = problem.batch_step
    return max(step, math.ceil(raw / step) * step)


def _stage_one(problem: Problem, delta: float, b_lower: int, literal_early_stop: bool
               ) -> tuple[tuple[int, int, int] | None, int]:
    best: tuple[int, int, int] | None = None
    best_cost = math.inf
    evaluated = 0
    w_upper = min(problem.worker_limit(), problem.max_global_batch // b_lower)
    for w in range(problem.min_workers, w_upper + 1):
        for memory in problem.memory_grid()[::-1].tolist():
            max_batch = int(problem.workload.max_batch(memory))
            if max_batch < b_lower:
                break  # smaller memories hold smaller batches
            upper = min(max_batch, int(delta * problem.max_global_batch) // w)
            batches = np.arange(b_lower, upper + 1, problem.batch_step, dtype=np.int64)
            if batches.size == 0:
                break
            ev = evaluate(problem, w, memory, w, batches, batches)
            evaluated += batches.size
            on_time = ev.time_s <= problem.deadline_s / delta
            # The deadline is relaxed to T_max/δ here; every other constraint stays.
            admissible = on_time & ((ev.violation == Violation.NONE)
                                    | misses_only_deadline(problem, ev))
            if literal_early_stop and not on_time.all():
                admissible[np.argmin(on_time):] = False
            for index in np.flatnonzero(admissible):
                if ev.cost_usd[index] < best_cost:
                    best_cost = float(ev.cost_usd[index])
                    best = (w, memory, int(batches[index]))
            if (literal_early_stop and not on_time.all()) or not admissible.any():
                break
    return best, evaluated


def two_stage(problem: Problem, *, gamma_min: float = DEFAULT_GAMMA_MIN,
              deltas: tuple[float, ...] = DELTAS, literal_early_stop: bool = False,
              k_descending: bool = False) -> SearchResult:
    started = time.perf_counter()
    b_lower = batch_lower_bound(problem, gamma_min)
    best: Choice | None = None
    evaluated = 0
    last: Evaluation | None = None
    for delta in deltas:
        seed, count = _stage_one(problem, delta, b_lower, literal_early_stop)
        evaluated += count
        if seed is None:
            continue
        w, memory, ba = seed
        ks = np.arange(1, w + 1, dtype=np.int64)
        if k_descending:
            ks = ks[::-1]
        bn = aligned_non_aggregator_batch(problem, w, memory, ks, ba)
        ev = evaluate(problem, w, memory, ks, ba, bn)
        evaluated += ks.size
        last = ev
        for index in np.flatnonzero(ev.feasible):
            if best is None or ev.cost_usd[index] < best.cost_usd:
                best = choice_from(ev, int(index))
    elapsed = time.perf_counter() - started
    if best is None:
        if last is None:
            return SearchResult("two-stage", "kreduce", None,
                                "no ScatterReduce seed met T_max/δ and δ·B^g_max for any δ "
                                f"(B_lower = {b_lower}); try the exact search", evaluated,
                                elapsed, Violation.DEADLINE)
        violation, reason = infeasibility(problem, last)
        return SearchResult("two-stage", "kreduce", None, reason, evaluated, elapsed, violation)
    return SearchResult("two-stage", "kreduce", best, None, evaluated, elapsed)


def _lambda_dnn_worker_bound(problem: Problem, memory: int, batch_full: int) -> float:
    """λDNN Eq. 15: the fewest workers its simplified time model says meet the deadline."""
    wl, platform = problem.workload, problem.platform
    rate = batch_full / float(wl.train_time(batch_full, memory))         # R, samples/s
    storage_bw = float(platform.throughput("down", memory, wl.dataset_mb))  # B_f^s
    peer_bw = float(platform.throughput("down", memory, wl.model_mb))       # B_f^p
    work = wl.samples * problem.epochs
    lam = peer_bw * (rate * wl.dataset_mb + work * storage_bw)
    kappa = problem.deadline_s * rate * storage_bw * peer_bw
    mu = 2.0 * wl.model_mb * work * storage_bw * rate
    if not (kappa > 0 and math.isfinite(kappa)):  # no compute (M + m <= 0) or no bandwidth
        return math.inf
    first = lam / kappa + mu / (batch_full * kappa)
    if batch_full * math.ceil(first) <= problem.max_global_batch:
        return first
    cap = problem.max_global_batch
    denominator = cap * kappa - mu
    if denominator <= 0:
        return math.inf
    return max(cap / batch_full, cap * lam / denominator)


@dataclass
class _Visited:
    """What λDNN's provisioning saw: how many configurations, the furthest constraint they
    broke and the fastest time of those that only missed the deadline."""

    evaluated: int = 0
    fastest: float = math.inf
    furthest: Violation = Violation.NONE

    def note(self, violation: Violation, time_s: float) -> None:
        self.evaluated += 1
        self.furthest = max(self.furthest, violation)
        if violation == Violation.DEADLINE:
            self.fastest = min(self.fastest, time_s)

    def reason(self) -> str:
        if not self.evaluated:
            return ("no memory admits a worker count that meets the deadline under λDNN's "
                    "closed-form bounds")
        reason = VIOLATION_TEXT[self.furthest]
        if self.furthest == Violation.DEADLINE:
            reason += (f" (λDNN's provisioning visited {self.evaluated} configurations; the "
                       f"fastest takes {self.fastest:.0f} s)")
        return reason


def _lambda_dnn_at(problem: Problem, memory: int, batch_full: int, cheaper_than: float,
                   visited: _Visited) -> Choice | None:
    """At one memory: the fewest workers from λDNN's bound up that are feasible and cheaper
    than ``cheaper_than``, each with the full batch or the largest that fits the cap."""
    step = problem.batch_step
    lower = _lambda_dnn_worker_bound(problem, memory, batch_full)
    if not math.isfinite(lower):
        return None
    for w in range(max(problem.min_workers, math.ceil(lower)), problem.worker_limit() + 1):
        batch = (batch_full if batch_full * w <= problem.max_global_batch
                 else (problem.max_global_batch // w) // step * step)
        if batch < step:
            return None
        ev = evaluate(problem, w, memory, w, batch, batch, bsp=True)
        visited.note(Violation(int(ev.violation[0])), float(ev.time_s[0]))
        if ev.feasible[0] and ev.cost_usd[0] < cheaper_than:
            return choice_from(ev, 0)
    return None


def lambda_dnn(problem: Problem) -> SearchResult:
    started = time.perf_counter()
    step = problem.batch_step
    batch_full = max(step, math.ceil(problem.workload.b * LAMBDA_DNN_GAMMA
                                     / (1 - LAMBDA_DNN_GAMMA) / step) * step)
    best: Choice | None = None
    visited = _Visited()
    for memory in problem.memory_grid().tolist():
        if int(problem.workload.max_batch(memory)) < step:
            continue
        found = _lambda_dnn_at(problem, memory, batch_full,
                               math.inf if best is None else best.cost_usd, visited)
        best = found or best
    elapsed = time.perf_counter() - started
    if best is None:
        return SearchResult("lambda-dnn", "scatterreduce", None, visited.reason(),
                            visited.evaluated, elapsed,
                            visited.furthest if visited.evaluated else Violation.DEADLINE)
    return SearchResult("lambda-dnn", "scatterreduce", best, None, visited.evaluated, elapsed)


def standalone(problem: Problem) -> SearchResult:
    started = time.perf_counter()
    memory = problem.memory_grid()[-1]
    upper = min(int(problem.workload.max_batch(memory)), problem.max_global_batch)
    batches = problem.batch_grid(upper)
    if batches.size == 0:
        return SearchResult("standalone", "standalone", None,
                            f"memory: no batch of {problem.batch_step} fits {memory} MB",
                            0, time.perf_counter() - started, Violation.MEMORY)
    ev = evaluate(problem, 1, memory, 1, batches, batches)
    index = best_index(ev)
    elapsed = time.perf_counter() - started
    if index is None:
        violation, reason = infeasibility(problem, ev)
        return SearchResult("standalone", "standalone", None, reason, len(ev), elapsed,
                            violation)
    return SearchResult("standalone", "standalone", choice_from(ev, index), None, len(ev),
                        elapsed)
