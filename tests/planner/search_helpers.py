"""Checks and problems shared by the planner's search tests (test_search.py and the tests of
the model's extensions: quotas, S3 rates, the cache's throughput, pipelining)."""

from __future__ import annotations

import numpy as np

from fasdl.contract.plan import Plan
from planner.commands.planfile import to_plan
from planner.model.inputs.problem import Problem, Violation
from planner.model.inputs.profiles import load_platform, load_prices, load_workload
from planner.model.terms.cost_model import evaluate
from planner.search.searches import Choice, SearchResult


def same_optimum(a: SearchResult, b: SearchResult) -> bool:
    """Same configuration, or a tie in cost (SIMD and scalar math may differ in the last ulp)."""
    if a.choice is None or b.choice is None:
        return a.choice is None and b.choice is None
    if a.choice.key()[2:] == b.choice.key()[2:]:
        return True
    return bool(np.isclose(a.choice.cost_usd, b.choice.cost_usd, rtol=1e-12, atol=0.0))


def same_time(a: SearchResult, b: SearchResult) -> bool:
    if a.choice is None or b.choice is None:
        return a.choice is None and b.choice is None
    return bool(np.isclose(a.choice.time_s, b.choice.time_s, rtol=1e-12, atol=0.0))


def assert_satisfies_constraints(problem: Problem, choice: Choice) -> None:
    ev = evaluate(problem, choice.workers, choice.memory_mb, choice.aggregators,
                  choice.batch_aggregator, choice.batch_non_aggregator,
                  bsp=choice.sync == "bsp")
    assert ev.violation[0] == Violation.NONE
    assert choice.time_s <= problem.deadline_s
    assert choice.global_batch <= problem.max_global_batch
    wl = problem.workload
    assert max(choice.batch_aggregator, choice.batch_non_aggregator) <= wl.max_batch(
        choice.memory_mb)
    assert choice.aggregators == choice.workers or choice.batch_non_aggregator >= \
        choice.batch_aggregator
    segment = (ev.load_s[0] + ev.checkpoint_s[0] + choice.segment_iterations * ev.iteration_s[0])
    assert segment <= problem.timeout_s - problem.timeout_margin_s + 1e-9
    plan = to_plan(problem, choice, search="test")  # the contract re-validates everything
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.deployment.memory_mb == choice.memory_mb
    assert plan.training.segment_iterations <= choice.segment_iterations


def paper_problem(name: str, deadline: float, cap: int, epochs: int,
                  channel: str = "s3") -> Problem:
    return Problem(workload=load_workload(name), platform=load_platform(channel),
                   prices=load_prices(), epochs=epochs, deadline_s=deadline,
                   max_global_batch=cap)
