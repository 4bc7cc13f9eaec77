"""A fresh ElastiCache Serverless cache's ramp (planner/model/terms/cache_ramp.py): what it adds
to a run, and that a Valkey plan charges it unless the cache is warm."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from fasdl.contract.plan import Plan
from fasdl.run.guards import first_segment_fronts
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import load_platform
from planner.model.terms.cache_ramp import ramp_extra_s, seconds_to_reach
from planner.model.terms.cache_throughput import peak_ecpu_per_key
from planner.model.terms.cost_model import evaluate
from planner.model.terms.exchange_time import non_aggregator_times
from tests.planner.cli_helpers import cli, run
from tests.planner.search_helpers import paper_problem

RAMP = {"fresh_ecpu_per_s": 30_000.0, "doubling_s": 150.0}


def test_an_exchange_within_the_fresh_rate_loses_nothing() -> None:
    extra = ramp_extra_s(training_s=1_000.0, iteration_s=1.0, exchange_s=0.5,
                         ecpus_per_iteration=15_000.0, **RAMP)  # 30,000 ECPU/s exactly
    assert float(extra) == 0.0


def test_the_ramp_by_hand() -> None:
    """E = 120,000 ECPUs in T_x = 1 s of a 2 s iteration: at 30,000 ECPU/s the exchange takes
    4 s (slowdown 2.5), at 60,000 2 s (1.5), from 120,000 on 1 s. The first interval advances
    150/2.5 = 60 s and adds 90, the second 100 s and adds 50."""
    extra = ramp_extra_s(training_s=10_000.0, iteration_s=2.0, exchange_s=1.0,
                         ecpus_per_iteration=120_000.0, **RAMP)
    assert float(extra) == pytest.approx(140.0)
    # a run done within the first interval pays only its own share: 30 s of training, 2.5x
    short = ramp_extra_s(training_s=30.0, iteration_s=2.0, exchange_s=1.0,
                         ecpus_per_iteration=120_000.0, **RAMP)
    assert float(short) == pytest.approx(45.0)
    assert float(seconds_to_reach(120_000.0, **RAMP)) == 300.0
    assert float(seconds_to_reach(20_000.0, **RAMP)) == 0.0


def test_a_slower_doubling_costs_more() -> None:
    times = [float(ramp_extra_s(training_s=10_000.0, iteration_s=2.0, exchange_s=1.0,
                                ecpus_per_iteration=480_000.0, fresh_ecpu_per_s=30_000.0,
                                doubling_s=doubling)) for doubling in (150.0, 600.0)]
    assert times[1] == pytest.approx(4 * times[0])


def test_a_valkey_plan_charges_the_ramp_unless_the_cache_is_warm() -> None:
    problem = paper_problem("resnet50-cifar10", 1e6, 512, 1, "valkey")
    configuration = (np.array([8]), np.array([2048]), np.array([2]), np.array([64]),
                     np.array([64]))
    fresh = evaluate(problem, *configuration)
    warm = evaluate(dataclasses.replace(problem, cache_warm=True), *configuration)
    assert float(warm.cache_ramp_s[0]) == 0.0 and float(fresh.cache_ramp_s[0]) > 0.0
    assert float(fresh.time_s[0]) == pytest.approx(float(warm.time_s[0])
                                                   + float(fresh.cache_ramp_s[0]))
    assert float(fresh.cost_lambda_usd[0]) == pytest.approx(
        float(warm.cost_lambda_usd[0]) + float(fresh.cache_ramp_usd[0]))
    on_s3 = evaluate(paper_problem("resnet50-cifar10", 1e6, 512, 1, "s3"), *configuration)
    assert np.isnan(on_s3.cache_ramp_s[0])


def test_the_busiest_key_is_a_merged_shard_every_other_worker_reads() -> None:
    """Issue 45's case: (W−1)·e(S_s) ECPUs within a non-aggregator's download time; more
    aggregators make each key smaller."""
    problem = paper_problem("resnet50-cifar10", 1e6, 512, 1, "valkey")
    w, mem = np.array([64, 64]), np.array([2048, 2048])
    k = np.array([1, 64])
    per_key = peak_ecpu_per_key(problem, w, mem, k)
    _, download_n = non_aggregator_times(problem, mem, k)
    merged_kb = problem.workload.model_mb / k * 1024
    np.testing.assert_allclose(per_key, 63 * merged_kb / download_n)
    assert per_key[1] < per_key[0]
    assert float(peak_ecpu_per_key(problem, 1, 2048, 1)) == 0.0


W64 = ("plan", "--workload", "resnet50-cifar10", "--channel", "valkey", "--deadline", "20000",
       "--max-global-batch", "4096", "--epochs", "2", "--min-workers", "64",
       "--max-concurrency", "128")


def test_a_w64_plan_on_a_fresh_cache_charges_the_ramp_and_on_a_warm_one_not(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 45's done-when: W = 64 on Valkey. Fresh: the ramp by the documented rule (the
    plan's own figures put through ramp_extra_s), in --json, --explain and the plan's typed
    fields, charged to the first segment by the guards; warm: none."""
    code, document, _ = run(capsys, *W64, "--out", str(tmp_path / "fresh.json"))
    assert code == 0, document
    breakdown = document["plan"]["prediction"]["breakdown"]
    plan = Plan.from_json((tmp_path / "fresh.json").read_text())
    prediction = plan.prediction
    assert plan.deployment.workers == 64 and prediction is not None
    assert prediction.cache_ramp_s == breakdown["cache_ramp_s"] > 0
    assert (prediction.cache_fresh_ecpu_per_s, prediction.cache_ramp_doubling_s) == (
        RAMP["fresh_ecpu_per_s"], RAMP["doubling_s"])
    iteration = breakdown["iteration_s"]
    exchange = min(iteration, sum(breakdown[f"{phase}_s"]
                                  for phase in ("upload", "aggregate", "download")))
    by_rule = float(ramp_extra_s(
        training_s=plan.total_iterations * iteration, iteration_s=iteration,
        exchange_s=exchange, ecpus_per_iteration=breakdown["cache_ecpu_per_s_mean"] * iteration,
        **RAMP))
    assert prediction.cache_ramp_s == pytest.approx(by_rule, rel=1e-4)
    assert first_segment_fronts(plan)[0] == prediction.cache_ramp_s  # the first segment's
    code, explained, _ = cli(*W64, "--explain")
    assert code == 0 and f"the ramp adds {prediction.cache_ramp_s:,.1f} s" in explained
    code, document, _ = run(capsys, *W64, "--cache-warm")
    warm = document["plan"]["prediction"]["breakdown"]
    assert warm["cache_ramp_s"] == 0.0 and "cache_fresh_ecpu_per_s" not in warm
    code, explained, _ = cli(*W64, "--cache-warm", "--explain")
    assert "cache ramp: none charged (--cache-warm" in explained


def _slow_ramp(problem: Problem) -> Problem:
    """AWS's older text: doubling every 10 minutes, not 2-3."""
    return dataclasses.replace(problem, platform=dataclasses.replace(
        problem.platform, cache_ramp_doubling_s=600.0))


W64_M2048 = (np.array([64]), np.array([2048]), np.array([8]), np.array([16]), np.array([16]))


def test_a_fresh_cache_is_waited_for_where_that_is_cheaper_and_meets_the_deadline() -> None:
    """cost_model._start_fresh_cache: W = 64 at 2 GB on a ramp doubling every 600 s pays more
    Lambda time than an hour of the cache's minimum, so the run waits cache_prescale_s, no
    ramp, no Lambda during the wait; at 150 s it ramps; a deadline the wait would pass keeps
    the ramp; a warm cache neither."""
    problem = _slow_ramp(paper_problem("resnet50-cifar10", 1e6, 4096, 1, "valkey"))
    waits = evaluate(problem, *W64_M2048)
    warm = evaluate(dataclasses.replace(problem, cache_warm=True), *W64_M2048)
    prescale = problem.platform.cache_prescale_s
    assert prescale == 3_600.0
    assert float(waits.cache_wait_s[0]) == prescale and float(waits.cache_ramp_s[0]) == 0.0
    assert float(waits.time_s[0]) == pytest.approx(float(warm.time_s[0]) + prescale)
    assert float(waits.cost_lambda_usd[0]) == pytest.approx(float(warm.cost_lambda_usd[0]))
    assert float(waits.cost_cache_minimum_usd[0]) > float(warm.cost_cache_minimum_usd[0])
    ramping = evaluate(paper_problem("resnet50-cifar10", 1e6, 4096, 1, "valkey"), *W64_M2048)
    assert float(ramping.cache_wait_s[0]) == 0.0 and float(ramping.cache_ramp_s[0]) > 0.0
    hurried = dataclasses.replace(problem, deadline_s=float(warm.time_s[0]) + prescale / 2)
    ramps = evaluate(hurried, *W64_M2048)
    assert float(ramps.cache_wait_s[0]) == 0.0 and float(ramps.cache_ramp_s[0]) > 0.0
    assert float(ramps.cost_usd[0]) > float(waits.cost_usd[0])  # dearer, but in time
    assert float(warm.cache_wait_s[0]) == 0.0 and float(warm.cache_ramp_s[0]) == 0.0


def test_a_plan_that_waits_says_so_and_carries_the_wait(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The plan's typed prediction.cache_wait_s (what the trigger waits for), no ramp fields,
    --explain's line, and the guards' first-segment front; the same plan on the shipped
    150 s doubling ramps."""
    platform = load_platform("valkey").to_dict()
    platform["cache_ramp_doubling_s"] = 900.0  # the search finds cheap ramps at 600
    (tmp_path / "slow-ramp.json").write_text(json.dumps(platform))
    args = (*W64, "--platform", str(tmp_path / "slow-ramp.json"))
    code, document, _ = run(capsys, *args, "--out", str(tmp_path / "plan.json"))
    assert code == 0, document
    plan = Plan.from_json((tmp_path / "plan.json").read_text())
    prediction = plan.prediction
    assert prediction is not None and prediction.cache_wait_s == 3_600.0
    assert not prediction.charges_cache_ramp and prediction.cache_fresh_ecpu_per_s is None
    assert first_segment_fronts(plan) == (3_600.0, 0.0)
    code, explained, _ = cli(*args, "--explain")
    assert code == 0 and "the first segment waits until the cache is 3,600 s old" in explained
