"""One segment boundary of an adaptive run (issue 42): the segments measured so far refitted
(planner/adapt/online_calibration.py), the rest of the run re-planned on them
(planner/adapt/replan.py), and the decision as the record the run keeps (:class:`Adaptation`:
the summary's ``adaptations`` entry, JSON with rounded figures).

Inputs are the plan, the profiles it was made with (planner/adapt/plan_problem.py), where the
run stands (:class:`Boundary`) and the configuration it runs now (the plan's, or the last
change's). The segments given must have run at that configuration: its batches are what their
compute times were measured at. The remaining work is the plan's iterations less those done;
the remaining deadline and budget are the plan's guard limits less the run's elapsed seconds
and spent USD. The same inputs give the same record, byte for byte: a retried or resumed
segment can re-derive it and must find the one recorded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from fasdl.contract.plan import Plan
from planner.adapt.online_calibration import (
    AGGREGATOR,
    NON_AGGREGATOR,
    ClockWindow,
    OnlineFit,
    SegmentRoles,
    online_fit,
    segment_overhead_s,
)
from planner.adapt.plan_problem import configuration_of, problem_of
from planner.adapt.replan import Configuration, Decision, Prospect, Remaining, ReplanError, decide
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import PlatformProfile, Prices, WorkloadProfile
from planner.model.terms.cost_model import evaluate

DIGITS = 6  # figures in the record: enough to compare, stable across platforms' last bits


@dataclass(frozen=True)
class Boundary:
    """Where the run stands before segment ``segment``."""

    segment: int
    iterations_done: int
    elapsed_s: float
    spent_usd: float
    segments: tuple[SegmentRoles, ...]  # finished, at the current configuration
    window: ClockWindow | None = None  # the run's clock over them (None: not known)


@dataclass(frozen=True)
class Adaptation:
    """The decision at one boundary and what it rests on (module docstring)."""

    segment: int
    policy: str
    action: str  # continue | change | stop
    reason: str
    current: Configuration
    chosen: Configuration | None
    before: tuple[float, float]  # continuing: predicted seconds and USD for the rest
    after: tuple[float, float] | None  # the chosen configuration's
    segment_iterations: int | None  # the chosen configuration's segment length (cost model)
    planned: dict[str, float]  # coefficients as planned ...
    measured: dict[str, float]  # ... and as the segments refitted them
    kept: tuple[str, ...]  # what the segments could not identify
    elapsed_s: float  # the run's clock at this boundary ...
    iterations_done: int  # ... and its iterations: a later boundary's clock window

    def to_dict(self) -> dict[str, Any]:
        rounded: dict[str, Any] = _rounded(asdict(self))
        return rounded

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, DIGITS)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(item) for item in value]
    return value


def remaining_of(plan: Plan, boundary: Boundary) -> Remaining:
    """The plan's work and guard limits less what the run has done and spent."""
    if plan.limits is None:
        raise ReplanError("limits: a plan without limits has no deadline to re-plan for")
    if not 0 <= boundary.iterations_done < plan.total_iterations:
        raise ReplanError(f"boundary.iterations_done must be in 0-{plan.total_iterations - 1}"
                          f" (the plan's iterations less one), got {boundary.iterations_done}")
    return Remaining(plan.total_iterations - boundary.iterations_done,
                     plan.limits.deadline_s - boundary.elapsed_s,
                     plan.limits.budget_usd - boundary.spent_usd)


def _coefficients(problem: Problem, memory_mb: int, factor: float) -> dict[str, float]:
    workload, platform = problem.workload, problem.platform
    return {"a": workload.a, "b": workload.b, "m": workload.m,
            "cold_start_s": float(platform.cold_start_s(memory_mb)), "exchange_factor": factor,
            "segment_overhead_s": platform.segment_overhead_s}


def _predicted_exchange_s(problem: Problem, current: Configuration, memory_mb: int,
                          bsp: bool) -> float:
    """The aggregator's iteration outside its compute, as planned: what role_times measures
    as its exchange (transfers and waits)."""
    planned = evaluate(problem, current.workers, memory_mb, current.aggregators,
                       current.batch_aggregator, current.batch_non_aggregator, bsp=bsp)
    return float(planned.iteration_s[0] - planned.train_aggregator_s[0])


def _refit(problem: Problem, current: Configuration, memory_mb: int, bsp: bool,
           segments: Sequence[SegmentRoles], measured_on: str) -> OnlineFit:
    return online_fit(problem.workload, problem.platform, segments, memory_mb=memory_mb,
                      batches={AGGREGATOR: current.batch_aggregator,
                               NON_AGGREGATOR: current.batch_non_aggregator},
                      predicted_exchange_s=_predicted_exchange_s(problem, current, memory_mb,
                                                                 bsp),
                      measured_on=measured_on)


def adapt(plan: Plan, profiles: tuple[WorkloadProfile, PlatformProfile, Prices],
          boundary: Boundary, *, policy: str, workers_max: int, measured_on: str,
          current: Configuration | None = None,
          cache_ecpu_max: float | None = None) -> Adaptation:
    """The record of the decision before ``boundary.segment`` (module docstring);
    ``measured_on``: where the run runs (provenance's identifier: aws-lambda-x86_64,
    local-emulation); ``cache_ecpu_max``: the deployed cache's ECPU/s maximum (Valkey)."""
    problem = problem_of(plan, *profiles)
    current = current or configuration_of(plan)
    memory_mb, bsp = plan.deployment.memory_mb, plan.training.sync == "bsp"
    fit = _refit(problem, current, memory_mb, bsp, boundary.segments, measured_on)
    fit = _with_overhead(replace(problem, workload=fit.workload, platform=fit.platform),
                         current, memory_mb, bsp, boundary.window, fit)
    measured = replace(problem, workload=fit.workload, platform=fit.platform)
    decision = decide(measured, current, remaining_of(plan, boundary), policy=policy,
                      memory_mb=memory_mb, workers_max=workers_max, bsp=bsp,
                      cache_ecpu_max=cache_ecpu_max,
                      key_prefixes=plan.training.exchange_key_prefixes)
    return _record(boundary, policy, decision, fit, _coefficients(problem, memory_mb, 1.0),
                   _coefficients(measured, memory_mb, fit.exchange_factor))


def _with_overhead(refitted: Problem, current: Configuration, memory_mb: int, bsp: bool,
                   window: ClockWindow | None, fit: OnlineFit) -> OnlineFit:
    """``fit`` with the segment overhead the clock window shows beyond the refitted model."""
    if window is None or window.segments < 1:
        return replace(fit, kept=(*fit.kept, "segment overhead kept: no clock window"))
    at = evaluate(refitted, current.workers, memory_mb, current.aggregators,
                  current.batch_aggregator, current.batch_non_aggregator, bsp=bsp)
    overhead = segment_overhead_s(window, iteration_s=float(at.iteration_s[0]),
                                  cold_start_s=float(at.cold_start_s[0]),
                                  load_and_checkpoint_s=float(at.load_s[0] + at.checkpoint_s[0]))
    return replace(fit, platform=replace(fit.platform, segment_overhead_s=overhead))


def _figures(prospect: Prospect | None) -> tuple[float, float] | None:
    return None if prospect is None else (prospect.time_s, prospect.cost_usd)


def _record(boundary: Boundary, policy: str, decision: Decision, fit: OnlineFit,
            planned: dict[str, float], measured: dict[str, float]) -> Adaptation:
    chosen, continuing = decision.chosen, decision.current
    return Adaptation(segment=boundary.segment, policy=policy, action=decision.action,
                      reason=decision.reason, current=continuing.configuration,
                      chosen=None if chosen is None else chosen.configuration,
                      before=(continuing.time_s, continuing.cost_usd),
                      after=_figures(chosen),
                      segment_iterations=None if chosen is None else chosen.segment_iterations,
                      planned=planned,
                      measured=measured, kept=fit.kept, elapsed_s=boundary.elapsed_s,
                      iterations_done=boundary.iterations_done)
