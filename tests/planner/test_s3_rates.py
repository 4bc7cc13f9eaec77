"""S3 requests at their peak, the hashed key prefixes the planner picks for them, and S3's
documented per-prefix rates as an exact constraint."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasdl.contract.keys import MAX_EXCHANGE_KEY_PREFIXES
from planner.commands.planfile import to_plan
from planner.model.inputs.problem import Problem, Violation
from planner.model.terms import s3_rates
from planner.model.terms.cost_model import evaluate
from planner.model.terms.exchange_cost import s3_requests_per_iteration
from planner.model.terms.s3_rates import (
    GET_PER_PREFIX_PER_S,
    PUT_PER_PREFIX_PER_S,
    peak_s3_request_rates,
    prefixes_needed,
    s3_utilisation,
)
from planner.search.searches import exact, exhaustive
from tests.examples import examples
from tests.planner.problems import problems
from tests.planner.search_helpers import paper_problem, same_optimum


def test_prefixes_are_the_fewest_within_both_rates() -> None:
    assert prefixes_needed(0.0, 0.0) == 1 and prefixes_needed(3_500.0, 5_500.0) == 1
    assert prefixes_needed(3_500.1, 0.0) == 2 and prefixes_needed(0.0, 11_000.1) == 3
    assert list(prefixes_needed([7_000.0, 100.0], [100.0, 55_000.0])) == [2, 10]
    assert float(s3_utilisation(3_500.0, 0.0)) == 1.0
    assert float(s3_utilisation(0.0, 11_000.0)) == 2.0


@pytest.mark.parametrize("chunks", [1, 4])
def test_the_peak_is_a_burst_above_the_iterations_mean(chunks: int) -> None:
    """Requests come in the exchange's phases, not spread over training and waiting: the peak
    is above the mean over the iteration, and not above all requests in the shortest phase."""
    problem = dataclasses.replace(paper_problem("mobilenet-cifar10", 20_000.0, 4096, 2, "s3"),
                                  exchange_chunks=chunks)
    ev = evaluate(problem, 64, 2048, 8, 32, 32)
    puts, gets = (float(r) for r in peak_s3_request_rates(problem, 64, 2048, 8))
    put_requests, get_requests = s3_requests_per_iteration(64, 8, chunks)
    iteration = float(ev.iteration_s[0])
    assert puts > 2 * float(put_requests) / iteration and gets > float(get_requests) / iteration
    alone = peak_s3_request_rates(problem, 1, 2048, 1)
    assert float(alone[0]) == float(alone[1]) == 0.0


def test_evaluate_spreads_the_peak_over_the_fewest_prefixes() -> None:
    problem = paper_problem("mobilenet-cifar10", 20_000.0, 100_000, 2, "s3")
    ws, ks = np.array([2, 64, 300, 1000]), np.array([1, 8, 30, 100])
    ev = evaluate(problem, ws, 3008, ks, 32, 32)
    puts, gets = peak_s3_request_rates(problem, ws, 3008, ks)
    prefixes = ev.s3_key_prefixes
    assert prefixes[0] == 1 and prefixes[-1] > 1  # grows with W and K
    assert np.allclose(ev.s3_requests_per_prefix_per_s * prefixes, puts)
    assert np.allclose(ev.s3_get_per_prefix_per_s * prefixes, gets)
    fewer = np.maximum(prefixes - 1, 1)
    over = (puts / fewer > PUT_PER_PREFIX_PER_S) | (gets / fewer > GET_PER_PREFIX_PER_S)
    assert np.all(over[prefixes > 1])  # one prefix fewer would be over S3's rates
    valkey = evaluate(paper_problem("mobilenet-cifar10", 20_000.0, 512, 2, "valkey"),
                      8, 2048, 4, 32, 32)
    assert np.isnan(valkey.s3_key_prefixes[0]) and np.isnan(valkey.s3_requests_per_prefix_per_s[0])


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(channel="s3"), workers=st.integers(1, 1000), data=st.data(),
       memory=st.integers(128, 10240), chunks=st.sampled_from([1, 2, 4]))
def test_every_s3_plan_stays_within_the_documented_rates(problem: Problem, workers: int,
                                                         data: st.DataObject, memory: int,
                                                         chunks: int) -> None:
    """Any W up to 1,000 and K: a configuration the model accepts asks no prefix for more
    than 3,500 PUT/DELETE or 5,500 GET per second; one it refuses for the rate needs more
    prefixes than the cap."""
    aggregators = data.draw(st.integers(1, workers))
    problem = dataclasses.replace(problem, exchange_chunks=chunks, max_workers=1000)
    ev = evaluate(problem, workers, memory, aggregators, 16, 16)
    puts, gets = (float(r) for r in peak_s3_request_rates(problem, workers, memory,
                                                           aggregators))
    too_many = int(prefixes_needed(puts, gets)) > MAX_EXCHANGE_KEY_PREFIXES
    if int(ev.violation[0]) == Violation.S3_REQUEST_RATE:
        assert too_many
    if too_many:  # marked S3_REQUEST_RATE unless another constraint binds first
        assert int(ev.violation[0]) != Violation.NONE
    if int(ev.violation[0]) == Violation.NONE:
        assert float(ev.s3_requests_per_prefix_per_s[0]) <= PUT_PER_PREFIX_PER_S * (1 + 1e-9)
        assert float(ev.s3_get_per_prefix_per_s[0]) <= GET_PER_PREFIX_PER_S * (1 + 1e-9)
        assert 1 <= float(ev.s3_key_prefixes[0]) <= MAX_EXCHANGE_KEY_PREFIXES


@pytest.mark.parametrize("min_workers", [64, 500])
def test_wide_plans_carry_their_prefixes_and_rates(min_workers: int) -> None:
    problem = dataclasses.replace(paper_problem("mobilenet-cifar10", 50_000.0, 100_000, 2, "s3"),
                                  min_workers=min_workers, max_workers=min_workers)
    result = exact(problem)
    assert result.choice is not None, result.reason
    b = result.choice.breakdown
    plan = to_plan(problem, result.choice, search="exact")
    assert plan.training.exchange_key_prefixes == b["s3_key_prefixes"] >= 1
    assert b["s3_requests_per_prefix_per_s"] <= PUT_PER_PREFIX_PER_S
    assert b["s3_get_per_prefix_per_s"] <= GET_PER_PREFIX_PER_S
    prediction = plan.to_dict()["prediction"]["breakdown"]
    assert prediction["s3_requests_per_prefix_per_s"] == pytest.approx(
        b["s3_requests_per_prefix_per_s"])
    if min_workers == 500:  # one prefix would be far over S3's rate at this width
        assert plan.training.exchange_key_prefixes > 1


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(channel="s3", small=True), put=st.floats(1.0, 200.0),
       prefixes=st.integers(1, 3))
def test_limited_exact_equals_exhaustive_and_keeps_the_rates(problem: Problem, put: float,
                                                             prefixes: int) -> None:
    """S3's rates lowered (and the prefixes capped) so that they bind on small grids."""
    problem = dataclasses.replace(problem, max_exchange_key_prefixes=prefixes)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(s3_rates, "PUT_PER_PREFIX_PER_S", put)
        patch.setattr(s3_rates, "GET_PER_PREFIX_PER_S", put * 11 / 7)
        fast, slow = exact(problem, "kreduce"), exhaustive(problem, "kreduce")
        assert same_optimum(fast, slow), (fast.choice, slow.choice)
        if fast.choice is None:
            assert fast.violation == slow.violation
            return
        b = fast.choice.breakdown
        assert b.get("s3_key_prefixes", 1) <= prefixes
        assert b.get("s3_requests_per_prefix_per_s", 0.0) <= put * (1 + 1e-9)
        assert b.get("s3_get_per_prefix_per_s", 0.0) <= put * 11 / 7 * (1 + 1e-9)


def test_rates_below_every_plan_are_named() -> None:
    problem = dataclasses.replace(paper_problem("mobilenet-cifar10", 20_000.0, 512, 2, "s3"),
                                  min_workers=2, max_workers=4, memory_max_mb=2048)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(s3_rates, "PUT_PER_PREFIX_PER_S", 1e-3)
        fast, slow = exact(problem, "kreduce"), exhaustive(problem, "kreduce")
    assert fast.choice is None and slow.choice is None
    assert fast.violation == slow.violation == Violation.S3_REQUEST_RATE
    assert fast.reason is not None and fast.reason.startswith("s3-request-rate")
    assert "256 prefix(es) at most" in fast.reason
