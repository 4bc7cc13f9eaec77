"""The channel objects (planner/model/terms/channels.py), each member against the figures the
planner's former ``channel == ...`` branches computed, written out here by hand."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fasdl.contract.cache import exchange_peak_copies
from fasdl.contract.plan import CHANNELS
from fasdl.contract.settings import DEFAULT_FENCE_CHECK_S
from planner.model.confidence import time_scaled_cost
from planner.model.inputs.problem import ModelInputError, Problem, Violation
from planner.model.inputs.profiles import load_prices
from planner.model.terms.cache_throughput import ecpus_per_iteration, peak_ecpu_per_s
from planner.model.terms.channels import (
    CHANNEL_COSTS,
    ExchangeRates,
    S3Costs,
    ValkeyCosts,
    channel_costs,
)
from planner.model.terms.s3_rates import peak_s3_request_rates, prefixes_needed
from planner.model.terms.segment_requests import segment_request_cost
from tests.planner.search_helpers import paper_problem

W = np.array([1, 4, 8], dtype=np.int64)
K = np.array([1, 2, 8], dtype=np.int64)
MEMORY = np.array([1024, 2048, 3008], dtype=np.int64)
ITERATIONS = np.array([100.0, 250.0, 40.0])
TIME_S = np.array([600.0, 1200.0, 90.0])
ITERATION_S = np.array([0.5, 1.5, 0.0])


def _problem(channel: str) -> Problem:
    return paper_problem("mobilenet-cifar10", 20_000.0, 512, 2, channel)


def test_every_channel_of_the_plan_contract_has_one_object() -> None:
    assert set(CHANNEL_COSTS) == set(CHANNELS)
    for channel in CHANNELS:
        assert channel_costs(_problem(channel)).name == channel


def test_s3_exchange_pays_puts_and_gets() -> None:
    problem = dataclasses.replace(_problem("s3"), exchange_chunks=2)
    prices = problem.prices
    # K·W·C PUTs and 2K(W−1)·C GETs per iteration, nothing for a lone worker (thesis 3-24..26)
    puts = np.array([0.0, 2 * 4 * 2, 8 * 8 * 2])
    gets = np.array([0.0, 2 * 2 * 3 * 2, 2 * 8 * 7 * 2])
    expected = ITERATIONS * (prices.s3_put * puts + prices.s3_get * gets)
    cost = S3Costs().exchange_cost(problem, W, K, ITERATIONS, TIME_S)
    np.testing.assert_array_equal(cost, expected)


def test_valkey_exchange_pays_ecpus_and_the_data_it_stores() -> None:
    problem = _problem("valkey")
    prices, model_mb = problem.prices, problem.workload.model_mb
    gb_hour, min_gb, ecpu_price = prices.require_valkey()
    traffic_mb = np.where(W <= 1, 0.0, model_mb * (3.0 * W - 2.0))  # S_m·(3W−2), 3-27
    ecpus = ITERATIONS * traffic_mb * 1024.0 / prices.valkey_kb_per_ecpu
    live_gb = np.where(W <= 1, 0.0, exchange_peak_copies(W.astype(float)) * model_mb / 1024.0)
    stored = np.maximum(min_gb, live_gb) * TIME_S / 3600.0 * gb_hour
    cost = ValkeyCosts().exchange_cost(problem, W, K, ITERATIONS, TIME_S)
    np.testing.assert_allclose(cost, ecpus * ecpu_price + stored, rtol=1e-12)
    assert cost[0] == pytest.approx(min_gb * 600.0 / 3600.0 * gb_hour)  # the metered minimum


@pytest.mark.parametrize(("channel", "claims"), [("s3", 4.0), ("valkey", 0.0)])
def test_a_worker_claims_its_slot_with_a_put_on_s3_only(channel: str, claims: float) -> None:
    prices = load_prices()
    store = CHANNEL_COSTS[channel]
    cost = segment_request_cost(prices, store.claim_puts_per_worker, np.array([4]),
                                np.array([2]), np.array([1.0]), np.array([0.0]))
    puts = 4 + 2 + 1 + 1 + claims  # checkpoint, manifest, the trigger's fence, the claims
    gets = 4 * 4 + 2 * 4 + 1 + 4 * 0.0 / DEFAULT_FENCE_CHECK_S
    assert float(cost[0]) == pytest.approx(prices.s3_put * puts + prices.s3_get * gets)


def test_only_the_cache_meters_a_minimum() -> None:
    s3, valkey = _problem("s3"), _problem("valkey")
    rates = ValkeyCosts().rates(valkey, W, MEMORY, K, ITERATION_S)
    np.testing.assert_array_equal(
        S3Costs().minimum_cost(s3, W, K, rates, ITERATIONS, TIME_S), np.zeros(3))
    consumed = ecpus_per_iteration(valkey, W, K) * ITERATIONS
    peak, mean = rates.cache_ecpu_per_s_peak, rates.cache_ecpu_per_s_mean
    exchanging = np.where(peak > 0, consumed / np.where(peak > 0, peak, 1.0), 0.0)
    idle = np.maximum(TIME_S - exchanging, 0.0)
    minimum = np.clip(np.ceil(mean), 1_000, 15_000_000)
    expected = minimum * idle * valkey.prices.require_valkey()[2]
    np.testing.assert_allclose(
        ValkeyCosts().minimum_cost(valkey, W, K, rates, ITERATIONS, TIME_S), expected,
        rtol=1e-12)


def test_each_store_reports_its_own_rates_and_nan_for_the_other() -> None:
    s3, valkey = _problem("s3"), _problem("valkey")
    on_s3 = S3Costs().rates(s3, W, MEMORY, K, ITERATION_S)
    puts, gets = peak_s3_request_rates(s3, W, MEMORY, K)
    prefixes = np.minimum(prefixes_needed(puts, gets), s3.max_exchange_key_prefixes)
    np.testing.assert_array_equal(on_s3.s3_key_prefixes, prefixes)
    np.testing.assert_array_equal(on_s3.s3_requests_per_prefix_per_s, puts / prefixes)
    np.testing.assert_array_equal(on_s3.s3_get_per_prefix_per_s, gets / prefixes)
    assert np.isnan(on_s3.cache_ecpu_per_s_peak).all()
    assert np.isnan(on_s3.cache_ecpu_per_s_mean).all()

    on_valkey = ValkeyCosts().rates(valkey, W, MEMORY, K, ITERATION_S)
    np.testing.assert_array_equal(on_valkey.cache_ecpu_per_s_peak,
                                  peak_ecpu_per_s(valkey, W, MEMORY, K))
    mean = ecpus_per_iteration(valkey, W, K)[:2] / ITERATION_S[:2]
    np.testing.assert_array_equal(on_valkey.cache_ecpu_per_s_mean, [*mean, 0.0])
    assert np.isnan(on_valkey.s3_key_prefixes).all()


def _rates(peak: float = math.nan, puts: float = math.nan,
           gets: float = math.nan) -> ExchangeRates:
    one = (np.array([value]) for value in (peak, math.nan, 1.0, puts, gets, math.nan))
    return ExchangeRates(*one)


def test_the_rate_caps() -> None:
    s3, valkey = _problem("s3"), _problem("valkey")
    cap = valkey.max_cache_ecpu_per_s
    assert S3Costs().rate_violation == Violation.S3_REQUEST_RATE
    assert ValkeyCosts().rate_violation == Violation.CACHE_THROUGHPUT
    assert ValkeyCosts().over_rate_limit(valkey, _rates(peak=cap * 1.01)).tolist() == [True]
    assert ValkeyCosts().over_rate_limit(valkey, _rates(peak=cap)).tolist() == [False]
    # over S3's 3,500 PUT/DELETE per prefix, unless the limits are lifted
    over = _rates(puts=3_600.0, gets=10.0)
    assert S3Costs().over_rate_limit(s3, over).tolist() == [True]
    assert S3Costs().over_rate_limit(s3, _rates(puts=3_500.0, gets=5_500.0)).tolist() == [False]
    lifted = dataclasses.replace(s3, s3_request_limits=False)
    assert S3Costs().over_rate_limit(lifted, over).tolist() == [False]


def test_only_the_cache_cuts_triples_in_the_exact_search() -> None:
    s3, valkey = _problem("s3"), _problem("valkey")
    assert S3Costs().within_rate_limit(s3, W, 1024, K).all()
    assert ValkeyCosts().within_rate_limit(valkey, W, 1024, K).all()
    peak = peak_ecpu_per_s(valkey, W, 1024, K)
    tight = dataclasses.replace(valkey, max_cache_ecpu_per_s=max(1_000.0, float(peak[1])))
    np.testing.assert_array_equal(ValkeyCosts().within_rate_limit(tight, W, 1024, K),
                                  peak <= tight.max_cache_ecpu_per_s)
    unlimited = dataclasses.replace(valkey, max_cache_ecpu_per_s=math.inf)
    assert ValkeyCosts().within_rate_limit(unlimited, W, 1024, K).all()


def test_lifting_a_cap_asks_whether_it_binds() -> None:
    s3, valkey = _problem("s3"), _problem("valkey")
    lifted_s3 = S3Costs().lifted(s3)
    assert lifted_s3 is not None and not lifted_s3.s3_request_limits
    assert S3Costs().lifted(lifted_s3) is None
    lifted_valkey = ValkeyCosts().lifted(valkey)
    assert lifted_valkey is not None and lifted_valkey.max_cache_ecpu_per_s == math.inf
    assert ValkeyCosts().lifted(lifted_valkey) is None
    assert "12,345,678 ECPU/s" in ValkeyCosts().limit_reason(valkey, _rates(peak=12_345_678))
    reason = S3Costs().limit_reason(s3, _rates(puts=7_000.0, gets=11_000.0))
    assert "7,000 PUT/DELETE and 11,000 GET" in reason


def test_the_duration_billed_part_and_the_report() -> None:
    breakdown = {"lambda_compute_usd": 1.0, "exchange_usd": 0.25, "cache_minimum_usd": 0.125,
                 "cache_ecpu_per_s_peak": 2_000.0, "cache_ecpu_per_s_mean": 1_500.0}
    assert time_scaled_cost(breakdown, S3Costs()) == 1.0
    assert time_scaled_cost(breakdown, ValkeyCosts()) == 1.375
    assert S3Costs().cost_line_extra(breakdown) == ""
    assert ValkeyCosts().cost_line_extra(breakdown) == ", cache minimum $0.1250"
    valkey = _problem("valkey")
    ramped = {**breakdown, "cache_ecpu_per_s_peak": 100_000.0, "cache_ramp_s": 12.5,
              "cache_ramp_usd": 0.0042}
    assert ValkeyCosts().report_lines(valkey, ramped) == [
        "    cache throughput: peak 100,000 ECPU/s, mean 1,500 ECPU/s (cap 15,000,000 ECPU/s)",
        "    cache ramp: a fresh cache serves 30,000 ECPU/s, doubling every 150 s: the peak "
        "after 300 s; the ramp adds 12.5 s ($0.0042 of Lambda time) to the first segment "
        "(--cache-warm when it already runs)"]
    hot = {**breakdown, "cache_ecpu_per_s_per_key": 90_000.0}
    assert ValkeyCosts().report_lines(valkey, hot)[2] == (
        "    hot key: each merged shard is one key that every other worker reads, 90,000 "
        "ECPU/s at the network's speed, above ElastiCache's ~30,000 per hash slot: the "
        "download phase is charged at the slot's rate, 3.0x as long (more exchange chunks or "
        "aggregators spread it)")
    assert len(ValkeyCosts().report_lines(valkey, {**hot, "cache_ecpu_per_s_per_key": 2e4})) == 2
    warm = dataclasses.replace(valkey, cache_warm=True)
    assert ValkeyCosts().report_lines(warm, breakdown)[1] == (
        "    cache ramp: none charged (--cache-warm: the cache already serves its ECPU/s "
        "minimum)")
    assert S3Costs().report_lines(_problem("s3"), breakdown) == []
    s3_rates = {"s3_key_prefixes": 1.0, "s3_requests_per_prefix_per_s": 350.0,
                "s3_get_per_prefix_per_s": 550.0}
    assert S3Costs().report_lines(_problem("s3"), s3_rates) == [
        "    S3 peak requests per key prefix (1 prefixes): 350 PUT/DELETE/s of 3,500, "
        "550 GET/s of 5,500 (10%)"]


def test_a_lone_valkey_worker_falls_back_to_s3() -> None:
    assert ValkeyCosts().lone_worker_channel == "s3"
    assert S3Costs().lone_worker_channel is None


def test_a_channel_needs_its_own_prices() -> None:
    prices = load_prices("us-west-2")  # no confirmed ElastiCache price there
    prices.require_channel("s3")
    with pytest.raises(ModelInputError, match="valkey_gb_hour"):
        dataclasses.replace(_problem("valkey"), prices=prices)
