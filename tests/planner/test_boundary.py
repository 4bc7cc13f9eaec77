"""planner/adapt/boundary.py: one segment boundary of an adaptive run, from the plan, its
profiles and the segments measured so far, to the record the run keeps (issue 42)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fasdl.contract.plan import Plan
from planner.adapt import boundary
from planner.adapt.boundary import Boundary, adapt, remaining_of
from planner.adapt.online_calibration import SegmentRoles
from planner.adapt.plan_problem import configuration_of
from planner.adapt.replan import ReplanError
from planner.commands.planfile import to_plan
from planner.model.terms.cost_model import evaluate
from planner.search.searches import Choice, exact
from tests.planner.search_helpers import paper_problem

PROBLEM = paper_problem("resnet50-cifar10", 600.0, 2048, 2, "s3")
CHOICE: Choice = exact(PROBLEM).choice  # type: ignore[assignment]
BUDGET_USD = 1.0  # room for a change (the default, 1.5x the predicted cost, has none: below)


def plan_with(budget_usd: float | None) -> Plan:
    """The plan, in segments of 8 iterations (the model's would be the whole run here)."""
    plan = to_plan(PROBLEM, CHOICE, search="exact", budget_usd=budget_usd)
    return dataclasses.replace(plan, training=dataclasses.replace(plan.training,
                                                                  segment_iterations=8))


PLAN = plan_with(BUDGET_USD)
PROFILES = (PROBLEM.workload, PROBLEM.platform, PROBLEM.prices)
M = PLAN.deployment.memory_mb
CURRENT = configuration_of(PLAN)
CEILING = 4 * PLAN.deployment.workers
WHERE = "local-emulation"
PLANNED = evaluate(PROBLEM, CURRENT.workers, M, CURRENT.aggregators, CURRENT.batch_aggregator,
                   CURRENT.batch_non_aggregator)


def measured(index: int, compute: float = 1.0, exchange: float = 1.0) -> SegmentRoles:
    """What segment ``index`` measures on a platform whose compute and transfers take
    ``compute`` and ``exchange`` times the plan's."""
    iterations = PLAN.training.segment_iterations
    exchange_s = float(PLANNED.iteration_s[0] - PLANNED.train_aggregator_s[0])
    roles = {}
    for role, batch in (("aggregator", CURRENT.batch_aggregator),
                        ("non_aggregator", CURRENT.batch_non_aggregator)):
        roles[role] = {"iterations": iterations,
                       "compute_s_per_iteration": compute * float(
                           PROBLEM.workload.train_time(batch, M)),
                       "exchange_s_per_iteration": exchange * exchange_s,
                       "cold_start_s": float(PROBLEM.platform.cold_start_s(M))}
    return SegmentRoles(index, roles)


def at(segments: list[SegmentRoles], seconds_per_segment: float) -> Boundary:
    done = len(segments) * PLAN.training.segment_iterations
    return Boundary(segment=len(segments), iterations_done=done,
                    elapsed_s=len(segments) * seconds_per_segment, spent_usd=0.0,
                    segments=tuple(segments))


def segment_s(compute: float) -> float:
    """One segment's wall time at ``compute`` times the planned compute (exchange as planned)."""
    iteration = float(PLANNED.iteration_s[0] + (compute - 1.0) * PLANNED.train_aggregator_s[0])
    return PLAN.training.segment_iterations * iteration


def test_as_planned_the_run_continues_and_the_refit_finds_the_plans_coefficients() -> None:
    segments = [measured(i) for i in range(2)]
    record = adapt(PLAN, PROFILES, at(segments, segment_s(1.0)), policy="deadline",
                   workers_max=CEILING, measured_on=WHERE)
    assert record.action == "continue" and record.chosen is None and record.after is None
    assert record.current == CURRENT
    assert record.measured["a"] == pytest.approx(record.planned["a"], rel=1e-6)
    assert record.measured["exchange_factor"] == pytest.approx(1.0)
    assert record.before[0] <= PLAN.limits.deadline_s - 2 * segment_s(1.0)  # type: ignore[union-attr]


def test_a_run_twice_as_slow_as_planned_changes_and_says_why() -> None:
    """Compute at twice the plan's, two segments in: continuing misses the guard's deadline;
    the record names the cheapest configuration that keeps it, at the plan's global batch,
    with the measured coefficients beside the planned ones."""
    segments = [measured(i, compute=2.0) for i in range(2)]
    boundary = at(segments, segment_s(2.0))
    record = adapt(PLAN, PROFILES, boundary, policy="deadline", workers_max=CEILING,
                   measured_on=WHERE)
    remaining = remaining_of(PLAN, boundary)
    assert record.action == "change", record
    assert record.before[0] > remaining.deadline_s
    assert record.chosen is not None and record.after is not None
    assert record.chosen.global_batch == CURRENT.global_batch
    assert CURRENT.workers < record.chosen.workers <= CEILING
    assert record.after[0] <= remaining.deadline_s
    assert record.measured["a"] == pytest.approx(2.0 * record.planned["a"], rel=1e-4)
    # same inputs, same record, byte for byte: what a retried segment re-derives
    again = adapt(PLAN, PROFILES, boundary, policy="deadline", workers_max=CEILING,
                  measured_on=WHERE)
    assert again.to_json() == record.to_json()
    document = json.loads(record.to_json())
    assert document["chosen"]["workers"] == record.chosen.workers
    assert document["segment"] == 2 and document["policy"] == "deadline"


def test_a_change_the_budget_cannot_pay_stops_naming_the_fastest() -> None:
    """With the default budget (1.5x the predicted cost) the configurations that keep the
    deadline cost more than is left: stop, as the guards would, naming the fastest."""
    plan = plan_with(None)
    segments = [measured(i, compute=2.0) for i in range(2)]
    boundary = at(segments, segment_s(2.0))
    record = adapt(plan, PROFILES, boundary, policy="deadline", workers_max=CEILING,
                   measured_on=WHERE)
    remaining = remaining_of(plan, boundary)
    assert (record.action, record.reason) == (
        "stop", "no configuration within the ceiling keeps both limits")
    assert record.chosen is not None and record.after is not None
    assert record.after[0] <= remaining.deadline_s < record.before[0]
    assert record.after[1] > remaining.budget_usd


def test_policy_off_only_records() -> None:
    segments = [measured(i, compute=2.0) for i in range(2)]
    record = adapt(PLAN, PROFILES, at(segments, segment_s(2.0)), policy="off",
                   workers_max=CEILING, measured_on=WHERE)
    assert (record.action, record.reason) == ("continue", "policy off")


def test_a_boundary_outside_the_plan_is_refused_naming_the_field() -> None:
    with pytest.raises(ReplanError, match=r"boundary.iterations_done must be in 0-"):
        remaining_of(PLAN, dataclasses.replace(at([measured(0)], 1.0),
                                               iterations_done=PLAN.total_iterations))
    with pytest.raises(ReplanError, match=r"remaining\.deadline_s and remaining\.budget_usd"):
        adapt(PLAN, PROFILES, at([measured(0)], 10_000.0), policy="deadline",
              workers_max=CEILING, measured_on=WHERE)


def test_slower_transfers_show_as_the_exchange_factor() -> None:
    """A plan over several workers whose aggregators measure twice the planned exchange: the
    refit divides the transfer peaks by 2 and the record says so."""
    tight = dataclasses.replace(PROBLEM, deadline_s=300.0)
    choice: Choice = exact(tight).choice  # type: ignore[assignment]
    plan = to_plan(tight, choice, search="exact", budget_usd=BUDGET_USD)
    assert plan.deployment.workers > 1
    current = configuration_of(plan)
    memory = plan.deployment.memory_mb
    planned = evaluate(tight, current.workers, memory, current.aggregators,
                       current.batch_aggregator, current.batch_non_aggregator)
    exchange_s = float(planned.iteration_s[0] - planned.train_aggregator_s[0])
    roles = {role: {"iterations": 4, "exchange_s_per_iteration": 2.0 * exchange_s,
                    "compute_s_per_iteration": float(tight.workload.train_time(batch, memory))}
             for role, batch in (("aggregator", current.batch_aggregator),
                                 ("non_aggregator", current.batch_non_aggregator))}
    boundary = Boundary(segment=1, iterations_done=4, elapsed_s=30.0, spent_usd=0.0,
                        segments=(SegmentRoles(0, roles),))
    record = adapt(plan, (tight.workload, tight.platform, tight.prices), boundary,
                   policy="deadline", workers_max=4 * current.workers, measured_on=WHERE)
    assert record.measured["exchange_factor"] == pytest.approx(2.0)
    assert record.planned["exchange_factor"] == 1.0
    assert not any(item.startswith("exchange kept") for item in record.kept)


def test_the_boundary_holds_the_re_plan_to_the_plans_key_prefixes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    real = boundary.decide

    def spy(*args: object, **kwargs: object) -> object:
        seen.update(kwargs)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(boundary, "decide", spy)
    adapt(PLAN, PROFILES, at([measured(0)], segment_s(1.0)), policy="deadline",
          workers_max=CEILING, measured_on=WHERE)
    assert seen["key_prefixes"] == PLAN.training.exchange_key_prefixes
