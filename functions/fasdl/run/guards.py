"""The deadline and budget guards the trigger runs between segments (its ``next`` action).

Before starting segment s+1 the trigger projects where the run would stand at its end: what
was measured so far (fasdl.run.usage: wall clock since the run started; the Lambda charge of
the recorded invocations plus the plan's non-Lambda cost for the iterations done) plus the
plan's prediction for the next segment (its share of the run's iterations) scaled by the
measured/predicted ratio so far. A fresh cache's ramp (``prediction.cache_ramp_s``) is charged
to the first segment, as the planner charges it to the first iterations: the predicted seconds
of the iterations done are the ramp plus the rest pro rata, and the next segment's the rest pro
rata; its dollars likewise, the ramp's share of the Lambda cost taken as ramp seconds / run
seconds (its Lambda time at every worker's price). A ramp longer than the first segment is
charged there whole, so the ratio after it reads a little fast until the ramp is done. A plan
that waits for the cache's pre-scaled minimum instead (``prediction.cache_wait_s``) starts its
clock at the execution's start and charges the wait's seconds to the first segment. When a
projection passes ``limits.deadline_s`` or
``limits.budget_usd`` the run stops before the segment: the checkpoint of the finished one is
kept, and :class:`~fasdl.contract.limits.DeadlineExceeded` /
:class:`~fasdl.contract.limits.BudgetExceeded` end the execution in ``DEADLINE_EXCEEDED`` /
``BUDGET_EXCEEDED`` (infra/guard_states.py). A plan without a prediction scales by the
iterations: measured x next / done. Stdlib only.

The limits are the plan's, or the execution input's ``limits`` (a resumed run's new ones,
kept in ``run.limits``).

After an adaptive run's change (``run.adaptive``, planner/adapt/run_step.py) the plan is the
one changed to, whose prediction is the new configuration's for the whole run: the ratio is
then measured over the iterations since the change (seconds and dollars since it, against
that prediction pro rata), and before any has run it is the ratio at the change, kept with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fasdl.contract.fields import is_number
from fasdl.contract.limits import BudgetExceeded, DeadlineExceeded, Limits
from fasdl.contract.plan import Plan, PlanError
from fasdl.run.usage import lambda_usd, predicted_other_usd

LIMIT_NAMES = ("deadline_s", "budget_usd")  # what an execution input may change
SINCE_FIELDS = ("since_iteration", "since_s", "since_usd", "ratio_s", "ratio_usd")


@dataclass(frozen=True)
class Since:
    """Where the run stood when its current plan took over (an adaptive run's change)."""

    iteration: int
    seconds: float
    usd: float
    ratio_s: float  # measured / predicted at the change: the pace until one more is measured
    ratio_usd: float


def since_of(run: Mapping[str, Any]) -> Since | None:
    """``run.adaptive``'s change point, or None (no change yet, or a static run)."""
    state = run.get("adaptive") or {}
    if not state.get("changes"):
        return None
    values: list[float] = []
    for name in SINCE_FIELDS:
        value = state.get(name)
        if not is_number(value) or value < 0:
            raise PlanError(f"run.adaptive.{name}", f"must be a number >= 0 after a change, "
                                                    f"got {value!r}")
        values.append(float(value))
    iteration, seconds, usd, ratio_s, ratio_usd = values
    return Since(int(iteration), seconds, usd, ratio_s, ratio_usd)


@dataclass(frozen=True)
class Projection:
    """One figure (seconds or USD): measured so far, the next segment's, and the ratio."""

    so_far: float
    next_segment: float
    ratio: float | None  # measured / predicted so far; None without a prediction

    @property
    def at_end(self) -> float:
        return self.so_far + self.next_segment


def project(measured: float, predicted_total: float | None, *, done: int, following: int,
            total: int, front: float = 0.0) -> Projection:
    """``following`` more iterations after ``done`` of ``total``, from ``measured`` so far;
    ``front`` of ``predicted_total`` belongs to the first segment (module docstring)."""
    if done <= 0 or total <= 0:
        return Projection(measured, 0.0, None)
    if predicted_total is None or predicted_total <= 0:
        return Projection(measured, measured * following / done, None)
    steady = max(0.0, predicted_total - front)
    ratio = measured / (front + steady * done / total)
    return Projection(measured, steady * following / total * ratio, ratio)


def project_since(measured: float, predicted_total: float | None, *, done: int,
                  following: int, total: int, since: Since, usd: bool) -> Projection:
    """:func:`project` from the change point ``since`` on (module docstring)."""
    start, ratio = (since.usd, since.ratio_usd) if usd else (since.seconds, since.ratio_s)
    if predicted_total is None or predicted_total <= 0:
        return project(measured, predicted_total, done=done, following=following, total=total)
    if done <= since.iteration:
        return Projection(measured, predicted_total * following / total * ratio, ratio)
    part = project(max(0.0, measured - start), predicted_total, done=done - since.iteration,
                   following=following, total=total)
    return Projection(measured, part.next_segment, part.ratio)


def first_segment_fronts(plan: Plan) -> tuple[float, float]:
    """(seconds, USD) the plan charged to the first segment alone: a fresh cache's ramp
    (seconds and their Lambda share), or the wait for its pre-scaled minimum (seconds only:
    no Lambda runs, its cache charges are pro rata like every non-Lambda cost); 0, 0 without."""
    prediction = plan.prediction
    if prediction is None or prediction.time_s <= 0:
        return 0.0, 0.0
    if prediction.cache_wait_s:
        return float(prediction.cache_wait_s), 0.0
    if not prediction.charges_cache_ramp:
        return 0.0, 0.0
    seconds = float(prediction.cache_ramp_s or 0.0)
    return seconds, prediction.lambda_compute_usd * min(1.0, seconds / prediction.time_s)


def cost_so_far(usage: Mapping[str, float], plan: Plan, limits: Limits, done: int) -> float:
    """Lambda as measured, plus the predicted non-Lambda cost (exchange, checkpoints, Step
    Functions) pro rata of the iterations done: those are not measured."""
    return lambda_usd(usage, limits) + predicted_other_usd(plan, done)


def run_limits(plan: Plan, run: Mapping[str, Any]) -> Limits | None:
    """The plan's limits with ``run.limits`` (an execution input's) applied."""
    override = run.get("limits")
    if not override:
        return plan.limits
    if plan.limits is None:
        raise PlanError("limits", "the run's plan has no limits (no prices to measure with): "
                                  "plan it again with python -m planner plan")
    changed = dataclasses.replace(plan.limits, **{name: override[name] for name in LIMIT_NAMES
                                                  if name in override})
    changed.validate()
    return changed


def check(plan: Plan, limits: Limits | None, usage: Mapping[str, float] | None, *, now: float,
          done: int, following: int, since: Since | None = None) -> None:
    """Raise DeadlineExceeded / BudgetExceeded when ``following`` more iterations after
    ``done`` would pass a limit; nothing to check without limits or measurements.
    ``since``: an adaptive run's last change (module docstring)."""
    if limits is None or usage is None or following <= 0:
        return
    total = plan.total_iterations
    where = f"before iterations {done}-{done + following} of {total}"
    time, cost = projections(plan, limits, usage, now=now, done=done, following=following,
                              since=since)
    if time.at_end > limits.deadline_s:
        raise DeadlineExceeded(
            f"stopped {where}: {time.so_far:.1f} s so far + {time.next_segment:.1f} s for the "
            f"next segment{_ratio(time)} = {time.at_end:.1f} s > limits.deadline_s "
            f"{limits.deadline_s:g} s; the last checkpoint is kept")
    if cost.at_end > limits.budget_usd:
        raise BudgetExceeded(
            f"stopped {where}: ${cost.so_far:.6f} so far + ${cost.next_segment:.6f} for the "
            f"next segment{_ratio(cost)} = ${cost.at_end:.6f} > limits.budget_usd "
            f"${limits.budget_usd:g}; the last checkpoint is kept")


def projections(plan: Plan, limits: Limits, usage: Mapping[str, float], *, now: float,
                 done: int, following: int, since: Since | None
                 ) -> tuple[Projection, Projection]:
    """(seconds, USD) at the end of the next ``following`` iterations."""
    total, prediction = plan.total_iterations, plan.prediction
    seconds, usd = max(0.0, now - usage["started_at"]), cost_so_far(usage, plan, limits, done)
    planned_s = prediction.time_s if prediction else None
    planned_usd = prediction.cost_usd if prediction else None
    if since is not None:
        return (project_since(seconds, planned_s, done=done, following=following,
                              total=total, since=since, usd=False),
                project_since(usd, planned_usd, done=done, following=following, total=total,
                              since=since, usd=True))
    front_s, front_usd = first_segment_fronts(plan)
    return (project(seconds, planned_s, done=done, following=following, total=total,
                    front=front_s),
            project(usd, planned_usd, done=done, following=following, total=total,
                    front=front_usd))


def _ratio(projection: Projection) -> str:
    if projection.ratio is None:
        return " (at the pace so far)"
    return f" (predicted x {projection.ratio:.2f}, the measured/predicted ratio so far)"


def raised_limits(plan: Plan, limits: Limits, usage: Mapping[str, float], *, now: float,
                  done: int) -> dict[str, float]:
    """Limits a resumed run could finish under: the whole run projected at the pace so far
    (x 1.25 headroom), never below the current ones."""
    remaining = plan.total_iterations - done
    prediction = plan.prediction
    front_s, front_usd = first_segment_fronts(plan)
    time = project(max(0.0, now - usage["started_at"]),
                   prediction.time_s if prediction else None,
                   done=done, following=remaining, total=plan.total_iterations, front=front_s)
    cost = project(cost_so_far(usage, plan, limits, done),
                   prediction.cost_usd if prediction else None,
                   done=done, following=remaining, total=plan.total_iterations,
                   front=front_usd)
    return {"deadline_s": round(max(limits.deadline_s, 1.25 * time.at_end), 1),
            "budget_usd": round(max(limits.budget_usd, 1.25 * cost.at_end), 6)}
