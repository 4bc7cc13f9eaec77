"""S3 request rates per key prefix: the rates, and S3's documented rates as an exact
constraint."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.model import s3_rates
from planner.model.cost_model import evaluate
from planner.model.problem import Problem, Violation
from planner.model.s3_rates import s3_request_rates, s3_utilisation
from planner.search.searches import exact, exhaustive
from tests.planner.problems import problems
from tests.planner.test_search import paper_problem, same_optimum


def test_rates_count_puts_deletes_and_gets_per_second_per_prefix() -> None:
    # W = 10, K = 3, C = 2: 60 PUTs and as many DELETEs, 2·3·9·2 = 108 GETs per iteration
    puts, gets = s3_request_rates(10, 3, 2.0, chunks=2, prefixes=1)
    assert float(puts) == 120 / 2.0 and float(gets) == 108 / 2.0
    puts4, gets4 = s3_request_rates(10, 3, 2.0, chunks=2, prefixes=4)
    assert float(puts4) == float(puts) / 4 and float(gets4) == float(gets) / 4
    alone = s3_request_rates(1, 1, 2.0)
    assert float(alone[0]) == float(alone[1]) == 0.0
    assert float(s3_utilisation(3_500.0, 0.0)) == 1.0
    assert float(s3_utilisation(0.0, 11_000.0)) == 2.0


def test_evaluate_reports_the_rates_of_its_iteration() -> None:
    problem = paper_problem("mobilenet-cifar10", 20_000.0, 512, 2, "s3")
    ev = evaluate(problem, 8, 2048, 4, 32, 32)
    iteration = float(ev.iteration_s[0])
    assert float(ev.s3_put_per_prefix_per_s[0]) == pytest.approx(2 * 4 * 8 / iteration)
    assert float(ev.s3_get_per_prefix_per_s[0]) == pytest.approx(2 * 4 * 7 / iteration)
    assert np.isnan(ev.cache_ecpu_per_s_peak[0])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(channel="s3", small=True), put=st.floats(1.0, 200.0),
       prefixes=st.integers(1, 3))
def test_limited_exact_equals_exhaustive_and_keeps_the_rates(problem: Problem, put: float,
                                                             prefixes: int) -> None:
    """S3's rates lowered so that they bind on small grids."""
    problem = dataclasses.replace(problem, exchange_key_prefixes=prefixes)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(s3_rates, "PUT_PER_PREFIX_PER_S", put)
        patch.setattr(s3_rates, "GET_PER_PREFIX_PER_S", put * 11 / 7)
        fast, slow = exact(problem, "kreduce"), exhaustive(problem, "kreduce")
        assert same_optimum(fast, slow), (fast.choice, slow.choice)
        if fast.choice is None:
            assert fast.violation == slow.violation
            return
        b = fast.choice.breakdown
        assert b["s3_put_per_prefix_per_s"] <= put * (1 + 1e-12)
        assert b["s3_get_per_prefix_per_s"] <= put * 11 / 7 * (1 + 1e-12)


def test_rates_below_every_plan_are_named() -> None:
    problem = dataclasses.replace(paper_problem("mobilenet-cifar10", 20_000.0, 512, 2, "s3"),
                                  min_workers=2, max_workers=4, memory_max_mb=2048)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(s3_rates, "PUT_PER_PREFIX_PER_S", 1e-3)
        fast, slow = exact(problem, "kreduce"), exhaustive(problem, "kreduce")
    assert fast.choice is None and slow.choice is None
    assert fast.violation == slow.violation == Violation.S3_REQUEST_RATE
    assert fast.reason is not None and fast.reason.startswith("s3-request-rate")
