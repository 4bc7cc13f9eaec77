"""planner/adapt/replan.py: the decision at a segment boundary, on the planner's own cost model,
at the plan's global batch and memory, within the deployed ceiling (issue 42, step 2)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.adapt.replan import (
    PAYBACK_MARGIN,
    Configuration,
    Decision,
    Remaining,
    ReplanError,
    candidates,
    decide,
    remaining_problem,
)
from planner.model.inputs.problem import Problem, Violation
from planner.model.terms.cost_model import evaluate
from planner.search.searches import Choice, exact
from tests.planner.search_helpers import paper_problem

DEADLINE_S, EPOCHS = 600.0, 2
PROBLEM = paper_problem("resnet50-cifar10", DEADLINE_S, 2048, EPOCHS, "s3")
PLAN: Choice = exact(PROBLEM).choice  # type: ignore[assignment]
CURRENT = Configuration(PLAN.workers, PLAN.aggregators, PLAN.batch_aggregator,
                        PLAN.batch_non_aggregator)
ALL = Remaining(int(PLAN.iterations_per_epoch * EPOCHS), DEADLINE_S, 1e6)
CEILING = 4 * PLAN.workers


def compute_times(factor: float) -> Problem:
    """The platform as measured: compute ``factor`` times the profile's."""
    return dataclasses.replace(PROBLEM, workload=dataclasses.replace(
        PROBLEM.workload, a=PROBLEM.workload.a * factor))


def run(problem: Problem, policy: str, remaining: Remaining = ALL) -> Decision:
    return decide(problem, CURRENT, remaining, policy=policy, memory_mb=PLAN.memory_mb,
                  workers_max=CEILING)


def test_a_run_twice_as_slow_scales_out_to_the_cheapest_configuration_that_keeps_the_deadline(
        ) -> None:
    slow = compute_times(2.0)
    decision = run(slow, "deadline")
    assert decision.action == "change" and decision.chosen is not None
    assert decision.current.time_s > DEADLINE_S  # as measured it would miss
    chosen = decision.chosen
    assert chosen.time_s <= DEADLINE_S
    assert chosen.configuration.global_batch == CURRENT.global_batch  # the recipe kept
    assert CURRENT.workers < chosen.configuration.workers <= CEILING
    # the cheapest of every candidate that keeps the deadline, by the same cost model
    rest = remaining_problem(slow, ALL, CURRENT.global_batch, PLAN.memory_mb)
    w, k, ba, bn = candidates(CURRENT.global_batch, CEILING, rest.batch_step)
    every = evaluate(rest, w, PLAN.memory_mb, k, ba, bn)
    keeps = (every.violation == Violation.NONE) & (every.time_s <= DEADLINE_S)
    assert chosen.cost_usd == pytest.approx(float(every.cost_usd[keeps].min()))
    assert run(slow, "deadline") == decision  # same inputs, same decision


def test_as_planned_nothing_changes_under_either_policy() -> None:
    for policy in ("deadline", "cost"):
        decision = run(PROBLEM, policy)
        assert decision.action == "continue" and decision.chosen is None, policy
    assert run(compute_times(2.0), "off").action == "continue"


def test_a_run_twice_as_fast_scales_in_under_cost_only() -> None:
    """A 300 s deadline makes the planner spread over three workers; at twice the speed
    fewer do it in time, cheaper by more than the payback margin."""
    tight = dataclasses.replace(PROBLEM, deadline_s=300.0)
    plan: Choice = exact(tight).choice  # type: ignore[assignment]
    current = Configuration(plan.workers, plan.aggregators, plan.batch_aggregator,
                            plan.batch_non_aggregator)
    fast = dataclasses.replace(tight, workload=dataclasses.replace(
        tight.workload, a=tight.workload.a * 0.5))
    remaining = Remaining(int(plan.iterations_per_epoch * EPOCHS), 300.0, 1e6)
    decisions = {policy: decide(fast, current, remaining, policy=policy,
                                memory_mb=plan.memory_mb, workers_max=4 * plan.workers)
                 for policy in ("deadline", "cost")}
    assert plan.workers > 1 and decisions["deadline"].action == "continue"
    decision = decisions["cost"]
    assert decision.action == "change" and decision.chosen is not None
    assert decision.chosen.configuration.workers < plan.workers
    assert decision.chosen.cost_usd * (1 + PAYBACK_MARGIN) <= decision.current.cost_usd
    assert decision.chosen.time_s <= 0.9 * 300.0


def test_when_nothing_keeps_the_limits_the_run_stops_naming_the_fastest() -> None:
    hurried = dataclasses.replace(ALL, deadline_s=60.0)
    decision = run(compute_times(2.0), "deadline", hurried)
    assert decision.action == "stop" and decision.chosen is not None
    assert decision.chosen.time_s > 60.0
    broke = dataclasses.replace(ALL, budget_usd=1e-4)
    assert run(compute_times(2.0), "deadline", broke).action == "stop"


def test_candidates_are_every_split_of_the_global_batch() -> None:
    g, ceiling, step = 96, 5, 16
    w, k, ba, bn = candidates(g, ceiling, step)
    found = set(zip(w.tolist(), k.tolist(), ba.tolist(), bn.tolist(), strict=True))
    expected = {(ww, kk, a, n) for ww in range(1, ceiling + 1) for kk in range(1, ww + 1)
                for a in range(step, g + 1, step) for n in range(a, g + 1)
                if kk * a + (ww - kk) * n == g and (kk < ww or n == a)}
    assert found == expected and len(found) > 10
    assert np.all(k * ba + (w - k) * bn == g)
    assert all(len(arr) == 0 for arr in candidates(8, 3, 16))


@pytest.mark.parametrize(("change", "message"), [
    ({"policy": "sometimes"}, "training.adaptive must be one of off, deadline, cost"),
    ({"workers_max": 1}, "outside 1-1, the ceiling"),
])
def test_bad_inputs_name_the_field(change: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"policy": "deadline", "memory_mb": PLAN.memory_mb,
                                    "workers_max": CEILING, **change}
    current = dataclasses.replace(CURRENT, workers=max(2, CURRENT.workers))
    with pytest.raises(ReplanError, match=message):
        decide(PROBLEM, current, ALL, **arguments)  # type: ignore[arg-type]
    for remaining in (dataclasses.replace(ALL, iterations=0),
                      dataclasses.replace(ALL, deadline_s=0.0)):
        with pytest.raises(ReplanError, match="remaining"):
            run(PROBLEM, "deadline", remaining)


def test_the_remaining_problem_is_the_rest_of_the_run_at_the_deployed_memory() -> None:
    half = dataclasses.replace(ALL, iterations=ALL.iterations // 2, deadline_s=300.0)
    rest = remaining_problem(PROBLEM, half, CURRENT.global_batch, PLAN.memory_mb)
    assert (rest.memory_min_mb, rest.memory_max_mb, rest.epochs) == (PLAN.memory_mb,) * 2 + (1,)
    assert rest.cache_warm and rest.deadline_s == 300.0
    assert rest.workload.samples == half.iterations * CURRENT.global_batch


def test_a_valkey_re_plan_keeps_within_the_deployed_caches_maximum() -> None:
    """The deployed cache's ECPU/s maximum caps every candidate: a cap just under the peak of
    the change made without one rules that change out, and what the decision names instead
    fits the cap (a candidate past the cap that also misses the deadline is not let through
    by the deadline's violation masking the cache's)."""
    valkey = dataclasses.replace(paper_problem("resnet50-cifar10", DEADLINE_S, 2048, EPOCHS,
                                               "valkey"), cache_warm=True)
    memory = 2048
    current = Configuration(2, 1, 16, 1008)  # G = 1024 over two workers
    probe = remaining_problem(valkey, Remaining(40, 1e6, 1e6), current.global_batch, memory)
    alone = evaluate(probe, current.workers, memory, current.aggregators,
                     current.batch_aggregator, current.batch_non_aggregator)
    remaining = Remaining(40, 0.5 * float(alone.time_s[0]), 1e6)  # continuing misses it
    free = decide(valkey, current, remaining, policy="deadline", memory_mb=memory,
                  workers_max=16)
    assert free.action == "change" and free.chosen is not None
    rest = remaining_problem(valkey, remaining, current.global_batch, memory)

    def peak(configuration: Configuration) -> float:
        c = configuration
        return float(evaluate(rest, c.workers, memory, c.aggregators, c.batch_aggregator,
                              c.batch_non_aggregator).cache_ecpu_per_s_peak[0])

    cap = peak(free.chosen.configuration) - 1.0
    capped = decide(valkey, current, remaining, policy="deadline", memory_mb=memory,
                    workers_max=16, cache_ecpu_max=cap)
    # nothing within the cap keeps the deadline here: a stop naming the fastest within it
    assert capped.action == "stop" and capped.chosen is not None
    assert capped.chosen.configuration.workers < free.chosen.configuration.workers
    assert peak(capped.chosen.configuration) <= cap
    nothing = decide(valkey, current, remaining, policy="deadline", memory_mb=memory,
                     workers_max=16, cache_ecpu_max=1_000.0)  # ElastiCache's least
    assert (nothing.action, nothing.chosen) == ("stop", None)


def test_the_s3_exchanges_key_prefixes_stay_the_runs() -> None:
    """A change keeps the exchange's hashed key labels (the cleanups cover the run's P): the
    re-plan's problem allows at most the plan's P, and so every candidate that would need
    more is refused by the cost model's S3 request-rate check (planner/model/terms/s3_rates)."""
    capped = remaining_problem(PROBLEM, ALL, CURRENT.global_batch, PLAN.memory_mb,
                               key_prefixes=3)
    assert capped.max_exchange_key_prefixes == 3
    assert remaining_problem(PROBLEM, ALL, CURRENT.global_batch, PLAN.memory_mb
                             ).max_exchange_key_prefixes == PROBLEM.max_exchange_key_prefixes
