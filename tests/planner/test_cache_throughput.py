"""ElastiCache Serverless throughput: the ECPU model, and the cap as an exact constraint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasdl.contract.cache import MAX_ECPU_PER_SECOND
from planner.commands.cli import main
from planner.model.inputs.problem import Problem, Violation
from planner.model.terms.cache_throughput import (
    ecpus_per_iteration,
    peak_ecpu_per_s,
)
from planner.model.terms.cost_model import evaluate
from planner.search.searches import exact, exhaustive
from tests.examples import examples
from tests.planner.problems import problems
from tests.planner.search_helpers import paper_problem, same_optimum

SETTINGS = settings(max_examples=examples(40), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _shipped(channel: str) -> Problem:
    return paper_problem("mobilenet-cifar10", 20_000.0, 512, 2, channel)


@pytest.fixture()
def problem_valkey() -> Problem:
    return _shipped("valkey")


@pytest.fixture()
def problem_s3() -> Problem:
    return _shipped("s3")


def _valkey(problem: Problem, **changes: object) -> Problem:
    return dataclasses.replace(problem, **changes)  # type: ignore[arg-type]


@given(problem=problems(channel="valkey"), w=st.integers(2, 1000), k_share=st.floats(0, 1))
@settings(max_examples=50, deadline=None)
def test_ecpus_per_iteration_are_a_kb_each_of_3w_minus_2_models(problem: Problem, w: int,
                                                                 k_share: float) -> None:
    k = max(1, int(k_share * w))
    kb_per_ecpu = problem.prices.valkey_kb_per_ecpu
    got = float(ecpus_per_iteration(problem, w, k)[()])
    shard_kb = problem.workload.model_mb / k * 1024
    if shard_kb >= kb_per_ecpu:  # every request moves at least 1 ECPU's worth
        expected = problem.workload.model_mb * 1024 * (3 * w - 2) / kb_per_ecpu
        assert got == pytest.approx(expected, rel=1e-9)
    assert got >= k * (3 * w - 2)  # K·(3W−2) requests, 1 ECPU each at least


def test_tiny_requests_cost_one_ecpu_each(problem_valkey: Problem) -> None:
    tiny = _valkey(problem_valkey, workload=problem_valkey.workload.with_workload(
        model_mb=1e-4))
    assert float(ecpus_per_iteration(tiny, 10, 5)[()]) == 5 * (3 * 10 - 2)
    assert float(ecpus_per_iteration(tiny, 1, 1)[()]) == 0.0


@given(problem=problems(channel="valkey"), w=st.integers(2, 200), memory=st.integers(128, 3008))
@settings(max_examples=50, deadline=None)
def test_phased_peak_at_one_aggregator_is_the_busiest_phase(problem: Problem, w: int,
                                                            memory: int) -> None:
    """K = 1: the non-aggregators upload S_m each, the aggregator downloads W−1 shards and
    publishes one, the non-aggregators download S_m each: rates from the platform's own
    transfer times, computed here without the model's terms."""
    problem = _valkey(problem, own_shard_local=True)
    s_m, per_kb = problem.workload.model_mb, 1024 / problem.prices.valkey_kb_per_ecpu
    e = max(1.0, s_m * per_kb)
    platform = problem.platform
    up, down = (float(platform.transfer_time(way, memory, s_m)) for way in ("up", "down"))
    upload = (w - 1) * e / up
    aggregate = ((w - 1) * e + e) / ((w - 1) * down + up)
    download = (w - 1) * e / down
    got = float(peak_ecpu_per_s(problem, w, memory, 1)[()])
    assert got == pytest.approx(max(upload, aggregate, download), rel=1e-9)


@SETTINGS
@given(problem=problems(channel="valkey", small=True),
       cap=st.floats(1_000, 2_000_000), chunks=st.sampled_from([1, 2]))
def test_capped_exact_equals_exhaustive_and_respects_the_cap(problem: Problem, cap: float,
                                                             chunks: int) -> None:
    problem = _valkey(problem, max_cache_ecpu_per_s=cap, exchange_chunks=chunks,
                      own_shard_local=problem.own_shard_local or chunks > 1)
    fast, slow = exact(problem, "kreduce"), exhaustive(problem, "kreduce")
    assert same_optimum(fast, slow), (fast.choice, slow.choice)
    if fast.choice is None:
        assert fast.violation == slow.violation
        return
    choice = fast.choice
    ev = evaluate(problem, choice.workers, choice.memory_mb, choice.aggregators,
                  choice.batch_aggregator, choice.batch_non_aggregator)
    assert ev.violation[0] == Violation.NONE
    assert choice.breakdown["cache_ecpu_per_s_peak"] <= cap
    assert choice.breakdown["cache_ecpu_per_s_mean"] <= choice.breakdown[
        "cache_ecpu_per_s_peak"] * (1 + 1e-9)


def test_a_cap_below_every_plan_is_named(problem_valkey: Problem) -> None:
    small = _valkey(problem_valkey, min_workers=2, max_workers=4, memory_max_mb=2048)
    free = exact(small, "kreduce")
    assert free.choice is not None  # a plan exists without the cap
    capped = _valkey(small, max_cache_ecpu_per_s=1_000.0)
    fast, slow = exact(capped, "kreduce"), exhaustive(capped, "kreduce")
    assert fast.choice is None and slow.choice is None
    assert fast.violation == slow.violation == Violation.CACHE_THROUGHPUT
    assert fast.reason is not None and fast.reason.startswith("cache-throughput")


def test_s3_plans_have_no_cache_rates(problem_s3: Problem) -> None:
    result = exact(problem_s3, "kreduce")
    assert result.choice is not None
    assert "cache_ecpu_per_s_peak" not in result.choice.breakdown


def test_five_hundred_workers_plan_within_the_cache(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    code = main(["plan", "--workload", "resnet50-cifar10", "--deadline", "3600",
                 "--max-global-batch", "16384", "--epochs", "1", "--channel", "valkey",
                 "--min-workers", "500", "--json", "--out", str(out)])
    printed = json.loads(capsys.readouterr().out)
    if code == 3:
        assert printed["search"]["reason"].startswith("cache-throughput")
        return
    assert code == 0
    breakdown = json.loads(out.read_text())["prediction"]["breakdown"]
    assert breakdown["cache_ecpu_per_s_peak"] <= MAX_ECPU_PER_SECOND
    assert 0 < breakdown["cache_ecpu_per_s_mean"] <= breakdown["cache_ecpu_per_s_peak"]
    assert np.isfinite(breakdown["cache_ecpu_per_s_mean"])
