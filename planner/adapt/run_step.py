"""The re-plan step of an adaptive run (issue 42): between the trigger's ``next`` (which has
issued the segment and run the guards) and the segment's workers, it takes the run state and
returns it, changed only by a recorded decision.

At the boundary before segment i (not the first): the segments finished since the current
plan took over are refitted and the rest re-planned (planner/adapt/boundary.py). The decision
is written once, to ``adaptations/<i>`` (a conditional create; an attempt that finds it there
uses it and never decides again, so a retried or resumed step reproduces the run state). A
change applies at an epoch's start only (fasdl/run/reshape.py): at once when segment i starts
one, else the segment is cut to end at the next epoch's start and the change is pending
(``run.adaptive.pending``) until that boundary, which makes no decision of its own (at most
one change per boundary, and none while one waits). Applying writes the new plan once
(``plans/<i>``: the plan with the chosen W, K, B^a, B^n and segment length, its prediction the
new configuration's for the whole run, the deployment's ceiling and the limits as they were),
points ``run.plan_key`` at it and lists the new workers. A stop decision changes nothing here:
the guards stop the run as they do for a static one, and the record names the fastest
configuration and its cost.

The run state gains ``adaptive``: ``since`` (the segment the current plan took over at),
``pending`` (a decision's key, or null), ``changes`` and, after a change, where the run stood
then (fasdl.run.guards.SINCE_FIELDS: the guards measure the pace from there).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from fasdl.contract.keys import adaptation_key, adapted_plan_key, results_key
from fasdl.contract.plan import Plan
from fasdl.run.guards import SINCE_FIELDS, Projection, projections, run_limits, since_of
from fasdl.run.usage import usage_of
from planner.adapt.boundary import Boundary, adapt
from planner.adapt.online_calibration import ClockWindow, SegmentRoles
from planner.adapt.plan_problem import problem_of
from planner.adapt.replan import ReplanError
from planner.model.inputs.profiles import PlatformProfile, Prices, WorkloadProfile
from planner.model.terms.cost_model import evaluate
from planner.search.prediction import prediction
from planner.search.searches import choice_from

ADAPTIVE = "adaptive"  # the run state's section (module docstring)


class RunStore(Protocol):
    """The results bucket as the step uses it."""

    def read(self, key: str) -> bytes | None: ...

    def create(self, key: str, data: bytes) -> bool:
        """Write ``key`` unless it exists; False when it did."""
        ...

    def segment_roles(self, run_id: str, index: int) -> Mapping[str, Mapping[str, Any]] | None:
        """fasdl.run.role_times' figures of segment ``index`` (its last attempt), or None."""
        ...


@dataclass(frozen=True)
class StepContext:
    runs_prefix: str
    profiles: tuple[WorkloadProfile, PlatformProfile, Prices]
    now: float  # seconds since the epoch
    measured_on: str  # aws-lambda-x86_64, local-emulation, ...
    cache_ecpu_max: float | None = None  # the deployed cache's ECPU/s maximum (Valkey)


def adaptive_state(run: Mapping[str, Any]) -> dict[str, Any]:
    """``run.adaptive``, its change point kept (the guards and the clock window read it at
    every boundary after a change)."""
    state = run.get(ADAPTIVE) or {"since": 0, "pending": None, "changes": 0}
    return {"since": int(state["since"]), "pending": state["pending"],
            "changes": int(state["changes"]),
            **{name: state[name] for name in SINCE_FIELDS if name in state}}


def replan_step(run: Mapping[str, Any], store: RunStore, context: StepContext
                ) -> dict[str, Any]:
    """The run state for the segment about to start (module docstring)."""
    plan = _load_plan(store, run["plan_key"])
    segment, state = run["segment"], adaptive_state(run)
    if plan.training.adaptive == "off" or segment["start_iteration"] == 0:
        return dict(run)
    applied = results_key(context.runs_prefix, adapted_plan_key(run["run_id"],
                                                                 segment["index"]))
    if run["plan_key"] == applied:  # this boundary's change is the run's plan already: a
        return dict(run)  # resumed or continued execution issued the segment anew
    if state["pending"] is not None:
        return _pending(run, plan, store, context, state)
    key = results_key(context.runs_prefix, adaptation_key(run["run_id"], segment["index"]))
    record = _read_json(store, key)
    if record is None and _spent(run, plan, context.now):
        return {**run, ADAPTIVE: state}  # nothing left to re-plan for: the guards stop it
    if record is None:
        record = _decide(run, plan, store, context, state)
        if not store.create(key, _json(record)):  # another attempt decided first: its record
            record = _read_json(store, key)
            if record is None:
                raise ReplanError(f"{key}: exists, yet cannot be read")
    if record["action"] != "change":
        return {**run, ADAPTIVE: state}
    if record["applies_from_iteration"] == segment["start_iteration"]:
        return _apply(run, plan, store, context, record, state)
    return _cut(run, record["applies_from_iteration"], {**state, "pending": key})


def _decide(run: Mapping[str, Any], plan: Plan, store: RunStore, context: StepContext,
            state: Mapping[str, Any]) -> dict[str, Any]:
    """The decision at this boundary, as recorded (module docstring)."""
    segment = run["segment"]
    roles = [(index, store.segment_roles(run["run_id"], index))
             for index in range(state["since"], segment["index"])]
    measured = tuple(SegmentRoles(index, found) for index, found in roles if found)
    if not measured:
        raise ReplanError(f"segments {state['since']}-{segment['index'] - 1}: no worker "
                          "results to measure the run by")
    done = int(segment["start_iteration"])
    # the limits the guards hold the run to: a resumed run's input may have changed them
    limited = dataclasses.replace(plan, limits=run_limits(plan, run))
    boundary = _boundary(run, plan, context.now, measured)
    boundary = dataclasses.replace(boundary, window=_clock_window(run, store, context, boundary))
    workers_max = _workers_max(run, plan)
    adaptation = adapt(limited, context.profiles, boundary,
                       policy=plan.training.adaptive,
                       workers_max=workers_max, measured_on=context.measured_on,
                       cache_ecpu_max=context.cache_ecpu_max)
    record = {**adaptation.to_dict(), "workers_max": workers_max}
    per_epoch = plan.iterations_per_epoch
    applies = -(-done // per_epoch) * per_epoch  # the first epoch start at or after ``done``
    if record["action"] == "change" and applies >= plan.total_iterations:
        record.update(action="continue", reason=record["reason"] + "; but a change applies "
                      "at an epoch's start, and the run ends first")
    record["applies_from_iteration"] = applies
    return record


def _workers_max(run: Mapping[str, Any], plan: Plan) -> int:
    """The most workers a decision may choose: the stack's ceiling, within what the account's
    concurrency held at the run's start (``run.workers_cap``), never below the current W."""
    cap = run.get("workers_cap")
    ceiling = plan.deployment.ceiling
    return ceiling if cap is None else max(len(run["workers"]), min(ceiling, int(cap)))


def _standing(run: Mapping[str, Any], plan: Plan, now: float) -> tuple[Projection, Projection]:
    """Where the run stands at this boundary as the guards see it (fasdl.run.guards, nothing
    following): seconds and dollars so far, and the measured/predicted ratios."""
    usage, limits = usage_of(run), run_limits(plan, run)
    if usage is None or limits is None:
        raise ReplanError("run.usage and the plan's limits: an adaptive run measures its "
                          "clock and spending against them, and has neither")
    return projections(plan, limits, usage, now=now, done=int(run["segment"]["start_iteration"]),
                       following=0, since=since_of(run))


def _spent(run: Mapping[str, Any], plan: Plan, now: float) -> bool:
    """Whether the run has used its whole deadline or budget already (a resumed run whose
    input kept the old limits, say)."""
    limits = run_limits(plan, run)
    if limits is None:
        return False
    time, cost = _standing(run, plan, now)
    return time.so_far >= limits.deadline_s or cost.so_far >= limits.budget_usd


def _boundary(run: Mapping[str, Any], plan: Plan, now: float,
              measured: tuple[SegmentRoles, ...]) -> Boundary:
    time, cost = _standing(run, plan, now)
    return Boundary(segment=int(run["segment"]["index"]),
                    iterations_done=int(run["segment"]["start_iteration"]),
                    elapsed_s=time.so_far, spent_usd=cost.so_far, segments=measured)


def _clock_window(run: Mapping[str, Any], store: RunStore, context: StepContext,
                  boundary: Boundary) -> ClockWindow:
    """The run's clock over the segments at the current configuration: from the earliest
    later boundary that recorded its clock (warm segments only), else from where the
    configuration took over (its cold start included)."""
    since = adaptive_state(run)["since"]
    for index in range(since + 1, boundary.segment):
        found = _read_json(store, results_key(context.runs_prefix,
                                              adaptation_key(run["run_id"], index)))
        if found is not None and "elapsed_s" in found:
            return ClockWindow(boundary.segment - index,
                               boundary.iterations_done - int(found["iterations_done"]),
                               boundary.elapsed_s - float(found["elapsed_s"]), cold=False)
    change = since_of(run)
    start_s, start_iteration = (0.0, 0) if change is None else (change.seconds, change.iteration)
    return ClockWindow(boundary.segment - since, boundary.iterations_done - start_iteration,
                       boundary.elapsed_s - start_s, cold=True)


def _pending(run: Mapping[str, Any], plan: Plan, store: RunStore, context: StepContext,
             state: Mapping[str, Any]) -> dict[str, Any]:
    """A change waiting for its epoch's start: applied there, the segment cut before it."""
    record = _read_json(store, state["pending"])
    if record is None:
        raise ReplanError(f"run.adaptive.pending: {state['pending']} cannot be read")
    if record["applies_from_iteration"] == run["segment"]["start_iteration"]:
        return _apply(run, plan, store, context, record, {**state, "pending": None})
    return _cut(run, record["applies_from_iteration"], dict(state))


def _cut(run: Mapping[str, Any], end: int, state: dict[str, Any]) -> dict[str, Any]:
    """The segment ends at iteration ``end`` at the latest."""
    segment = dict(run["segment"])
    segment["iterations"] = min(int(segment["iterations"]), end - int(segment["start_iteration"]))
    return {**run, "segment": segment, ADAPTIVE: state}


def _apply(run: Mapping[str, Any], plan: Plan, store: RunStore, context: StepContext,
           record: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, Any]:
    """The new plan written once, the run state switched to it."""
    segment = dict(run["segment"])
    changed = changed_plan(plan, record, context.profiles)
    key = results_key(context.runs_prefix, adapted_plan_key(run["run_id"], segment["index"]))
    text = changed.to_json().encode()
    if not store.create(key, text) and store.read(key) != text:
        raise ReplanError(f"{key}: holds another plan than this decision makes")
    start = int(segment["start_iteration"])
    segment["iterations"] = min(changed.training.segment_iterations,
                                plan.total_iterations - start)
    return {**run, "plan_key": key, "segment": segment,
            "workers": list(range(changed.deployment.workers)),
            ADAPTIVE: {"since": int(segment["index"]), "pending": None,
                       "changes": int(state["changes"]) + 1,
                       **_change_point(run, plan, context.now)}}


def changed_plan(plan: Plan, record: Mapping[str, Any],
                 profiles: tuple[WorkloadProfile, PlatformProfile, Prices]) -> Plan:
    """``plan`` at the recorded decision's configuration and segment length, its prediction
    the new configuration's for the whole run by the plan's own profiles (the guards scale it
    by the pace measured since the change, fasdl.run.guards)."""
    chosen = record["chosen"]
    changed = dataclasses.replace(
        # the ceiling stated, so the stack (built for it) serves this plan's W
        plan, deployment=dataclasses.replace(plan.deployment, workers=chosen["workers"],
                                             workers_max=plan.deployment.ceiling),
        training=dataclasses.replace(
            plan.training, aggregators=chosen["aggregators"],
            batch_aggregator=chosen["batch_aggregator"],
            batch_non_aggregator=chosen["batch_non_aggregator"],
            segment_iterations=int(record["segment_iterations"])))
    problem = dataclasses.replace(problem_of(plan, *profiles), cache_warm=True)
    t = changed.training
    evaluation = evaluate(problem, changed.deployment.workers, plan.deployment.memory_mb,
                          t.aggregators, t.batch_aggregator, t.batch_non_aggregator,
                          bsp=t.sync == "bsp")
    choice = choice_from(evaluation, 0, problem.exchange_chunks)
    return dataclasses.replace(changed, prediction=prediction(choice, problem))


def _change_point(run: Mapping[str, Any], plan: Plan, now: float) -> dict[str, float]:
    """Where the run stands at the change, for the guards (fasdl.run.guards.Since): its
    seconds and dollars so far and the measured/predicted ratios until then."""
    time, cost = _standing(run, plan, now)
    return {"since_iteration": int(run["segment"]["start_iteration"]),
            "since_s": round(time.so_far, 3), "since_usd": round(cost.so_far, 6),
            "ratio_s": round(time.ratio or 1.0, 6), "ratio_usd": round(cost.ratio or 1.0, 6)}


def _load_plan(store: RunStore, key: str) -> Plan:
    data = store.read(key)
    if data is None:
        raise ReplanError(f"run.plan_key: {key} cannot be read")
    return Plan.from_json(data)


def _read_json(store: RunStore, key: str) -> dict[str, Any] | None:
    data = store.read(key)
    if data is None:
        return None
    record: dict[str, Any] = json.loads(data)
    return record


def _json(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
