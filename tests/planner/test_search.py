"""Searches: exact equals the exhaustive reference; the heuristic never beats exact; plans are
valid; infeasible problems name the binding constraint."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.model.inputs.problem import Problem, Violation
from planner.model.terms.cost_model import evaluate
from planner.search.heuristic import lambda_dnn, standalone, two_stage
from planner.search.searches import (
    BN_RULES,
    Choice,
    Objective,
    choice_from,
    exact,
    exhaustive,
    frontier,
)
from tests.examples import examples
from tests.planner.problems import problems
from tests.planner.search_helpers import (
    assert_satisfies_constraints,
    paper_problem,
    same_optimum,
    same_time,
)

SEARCH_SETTINGS = settings(max_examples=examples(60), deadline=None,
                           suppress_health_check=[HealthCheck.too_slow])


@SEARCH_SETTINGS
@given(problem=problems(small=True, client_cpu=True), rule=st.sampled_from(BN_RULES),
       objective=st.sampled_from(["cost", "time"]),
       dtype=st.sampled_from(["float32", "bfloat16"]))
def test_exact_equals_exhaustive_on_random_problems(problem: Problem, rule: str,
                                                    objective: Objective, dtype: str) -> None:
    problem = dataclasses.replace(problem, exchange_dtype=dtype)  # bf16: the bounds still hold
    for pattern in ("kreduce", "scatterreduce", "allreduce"):
        fast = exact(problem, pattern, objective, bn_rule=rule)
        slow = exhaustive(problem, pattern, objective, bn_rule=rule)
        if objective == "cost":
            assert same_optimum(fast, slow), (pattern, fast.choice, slow.choice)
        else:
            assert same_time(fast, slow), (pattern, fast.choice, slow.choice)
        if fast.choice is None:
            assert fast.violation == slow.violation
            assert fast.reason and fast.reason.split(":")[0] in {
                "memory", "max-global-batch", "alignment", "dataset", "lambda-timeout",
                "deadline"}
        else:
            assert_satisfies_constraints(problem, fast.choice)
            # branch and bound evaluates part of the grid the reference walks whole
            assert fast.evaluated <= slow.evaluated


def deadline_near_the_fastest(problem: Problem, share: float) -> Problem:
    """The problem with its deadline at ``share`` of its fastest run: the bounds then prune
    by the deadline and the incumbent at once, where a wrong bound would show."""
    fastest = exact(problem, objective="time")
    if fastest.choice is None:
        return problem
    return dataclasses.replace(problem, deadline_s=max(1.0, fastest.choice.time_s * share))


@SEARCH_SETTINGS
@given(problem=problems(small=True), share=st.sampled_from([0.95, 1.0, 1.02, 1.3, 3.0]),
       rule=st.sampled_from(BN_RULES))
def test_exact_equals_exhaustive_near_the_deadline(problem: Problem, share: float,
                                                   rule: str) -> None:
    tight = deadline_near_the_fastest(problem, share)
    fast, slow = exact(tight, bn_rule=rule), exhaustive(tight, bn_rule=rule)
    assert same_optimum(fast, slow), (fast.choice, slow.choice)
    assert fast.violation == slow.violation


@SEARCH_SETTINGS
@given(problem=problems(small=True))
def test_searching_bn_is_never_worse_than_the_alignment_rule(problem: Problem) -> None:
    searched, aligned = exact(problem, bn_rule="search"), exact(problem, bn_rule="align")
    if aligned.choice is not None:
        assert searched.choice is not None
        assert searched.choice.cost_usd <= aligned.choice.cost_usd * (1 + 1e-12)


@SEARCH_SETTINGS
@given(problem=problems(small=True))
def test_exact_is_never_worse_than_two_stage_and_both_are_feasible(problem: Problem) -> None:
    best = exact(problem)
    for literal in (False, True):
        heuristic = two_stage(problem, literal_early_stop=literal)
        if heuristic.choice is None:
            continue
        assert best.choice is not None
        assert best.choice.cost_usd <= heuristic.choice.cost_usd * (1 + 1e-12)
        assert_satisfies_constraints(problem, heuristic.choice)


def _priced_as_kreduce(problem: Problem, choice: Choice) -> float | None:
    """A baseline's configuration as the K-REDUCE search prices it, under HAP (whose checkpoint
    also keeps the W - K non-aggregators' parameters, planner/model/terms/storage_cost.py); None
    when K-REDUCE cannot run it. Comparing costs without storage instead failed: HAP's storage
    premium can steer the optimum to another W, whose cost without storage is then higher."""
    evaluation = evaluate(problem, [choice.workers], [choice.memory_mb], [choice.aggregators],
                          [choice.batch_aggregator], [choice.batch_non_aggregator], bsp=False)
    if Violation(int(evaluation.violation[0])) is not Violation.NONE:
        return None
    return choice_from(evaluation, 0, problem.exchange_chunks).cost_usd


@SEARCH_SETTINGS
@given(problem=problems(small=True))
def test_baselines_return_feasible_plans_no_cheaper_than_exact(problem: Problem) -> None:
    best = exact(problem)
    for result in (lambda_dnn(problem), standalone(problem),
                   exact(problem, "scatterreduce"), exact(problem, "allreduce")):
        if result.choice is None:
            assert result.reason
            continue
        assert best.choice is not None
        as_kreduce = _priced_as_kreduce(problem, result.choice)
        if as_kreduce is not None:
            assert best.choice.cost_usd <= as_kreduce * (1 + 1e-12)
        assert_satisfies_constraints(problem, result.choice)
    alone = standalone(problem)
    if alone.choice is not None:
        assert alone.choice.workers == 1
        assert alone.choice.memory_mb == problem.memory_max_mb


@pytest.mark.parametrize("channel", ["s3", "valkey"])
@pytest.mark.parametrize(("rule", "cap", "memory"), [("align", 384, 3072), ("search", 256, 2048)])
def test_exact_equals_exhaustive_on_a_paper_workload(channel: str, rule: str, cap: int,
                                                     memory: int) -> None:
    # Distributed only and memory up to 2-3 GB, to keep the slow reference to a few seconds.
    problem = dataclasses.replace(paper_problem("squeezenet-cifar10", 3000, cap, 20, channel),
                                  min_workers=2, memory_max_mb=memory)
    fast, slow = exact(problem, bn_rule=rule), exhaustive(problem, bn_rule=rule)
    assert fast.choice is not None and same_optimum(fast, slow)
    assert slow.evaluated > 5_000 and fast.evaluated < slow.evaluated


def test_infeasible_problems_name_the_binding_constraint() -> None:
    too_soon = paper_problem("bert-base-cola", 100, 640, 6)
    result = exact(too_soon)
    assert result.choice is None and result.violation == Violation.DEADLINE
    assert "deadline" in (result.reason or "") and "fastest configuration" in (result.reason or "")
    too_small = dataclasses.replace(paper_problem("bert-base-cola", 2500, 640, 6),
                                    memory_max_mb=1536)
    result = exact(too_small)
    assert result.choice is None and result.violation == Violation.MEMORY
    assert result.reason and result.reason.startswith("memory")
    base = paper_problem("resnet50-cifar10", 80_000, 1024, 1)
    slow_start = dataclasses.replace(base.platform, invocation_overhead_s=45.0)
    no_room = dataclasses.replace(base, platform=slow_start, timeout_s=60.0,
                                  timeout_margin_s=20.0)
    result = exact(no_room)
    assert result.choice is None and result.violation == Violation.LAMBDA_TIMEOUT


def test_frontier_is_the_exact_optimum_at_each_deadline() -> None:
    problem = paper_problem("mobilenet-cifar10", 4000, 512, 21)
    deadlines = np.array([1000.0, 2000.0, 4000.0, 8000.0])
    for pattern in ("kreduce", "scatterreduce", "allreduce"):
        curve = frontier(problem, pattern, deadlines)
        finite = curve[~np.isnan(curve)]
        assert np.all(np.diff(finite) <= 1e-12)  # more time never costs more
        for deadline, cost in zip(deadlines, curve, strict=True):
            optimum = exact(dataclasses.replace(problem, deadline_s=float(deadline)), pattern)
            if optimum.choice is None:
                assert np.isnan(cost)
            else:
                assert cost == pytest.approx(optimum.choice.cost_usd, rel=1e-12)
