"""planner/adapt/plan_problem.py: a plan and the profiles it was made with give back the
problem it solves, so a re-plan prices the plan's own configuration as the plan did."""

from __future__ import annotations

import dataclasses

import pytest

from fasdl.contract.plan import Plan
from planner.adapt.plan_problem import configuration_of, problem_of
from planner.adapt.replan import ReplanError
from planner.commands.planfile import to_plan
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import load_platform, load_prices
from planner.model.terms.cost_model import evaluate
from planner.search.searches import Choice, exact
from tests.planner.search_helpers import paper_problem


def planned(problem: Problem) -> Plan:
    choice: Choice = exact(problem).choice  # type: ignore[assignment]
    return to_plan(problem, choice, search="exact")


def _slow_ramp(problem: Problem) -> Problem:
    """A ramp doubling every 600 s (AWS's older text): W = 64 then waits for the minimum."""
    return dataclasses.replace(problem, platform=dataclasses.replace(
        problem.platform, cache_ramp_doubling_s=600.0))


def _w64(problem: Problem) -> Problem:
    """W >= 64 at 2 GB (one memory size keeps the search short)."""
    return dataclasses.replace(problem, min_workers=64, memory_min_mb=2048, memory_max_mb=2048)


VALKEY_W64 = paper_problem("resnet50-cifar10", 20_000.0, 4096, 2, "valkey")
CASES = {  # name: (problem, the plan's cache start)
    "s3": (paper_problem("resnet50-cifar10", 900.0, 2048, 2, "s3"), None),
    "valkey-warm": (dataclasses.replace(paper_problem("resnet50-cifar10", 900.0, 2048, 2,
                                                      "valkey"), cache_warm=True), None),
    "valkey-ramp": (_w64(VALKEY_W64), "ramp"),
    "valkey-wait": (_slow_ramp(_w64(VALKEY_W64)), "wait"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_rebuilt_problem_prices_the_plans_configuration_as_the_plan_did(case: str) -> None:
    problem, start = CASES[case]
    plan = planned(problem)
    assert plan.prediction is not None
    prediction = plan.prediction
    assert start != "ramp" or (prediction.cache_ramp_s or 0) > 0
    assert start != "wait" or (prediction.cache_wait_s or 0) > 0
    rebuilt = problem_of(plan, problem.workload, problem.platform, problem.prices)
    assert rebuilt.cache_warm == (start is None)
    current = configuration_of(plan)
    assert current.global_batch == plan.global_batch
    again = evaluate(rebuilt, current.workers, plan.deployment.memory_mb, current.aggregators,
                     current.batch_aggregator, current.batch_non_aggregator,
                     bsp=plan.training.sync == "bsp")
    assert float(again.time_s[0]) == pytest.approx(prediction.time_s, abs=1e-3)
    assert float(again.cost_usd[0]) == pytest.approx(prediction.cost_usd, abs=1e-6)


def test_profiles_of_another_workload_channel_or_region_are_refused() -> None:
    problem = paper_problem("resnet50-cifar10", 900.0, 2048, 2, "s3")
    plan = planned(problem)
    other = paper_problem("squeezenet-cifar10", 900.0, 2048, 2, "s3").workload
    with pytest.raises(ReplanError, match="workload profile: is for 'squeezenet"):
        problem_of(plan, other, problem.platform, problem.prices)
    with pytest.raises(ReplanError, match="platform profile: is for valkey"):
        problem_of(plan, problem.workload, load_platform("valkey"), problem.prices)
    with pytest.raises(ReplanError, match="prices: are for eu-west-1"):
        problem_of(plan, problem.workload, problem.platform, load_prices("eu-west-1"))
    with pytest.raises(ReplanError, match="limits: a plan without limits"):
        problem_of(dataclasses.replace(plan, limits=None), problem.workload, problem.platform,
                   problem.prices)
