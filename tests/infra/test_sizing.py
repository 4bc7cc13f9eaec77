"""Plan-derived sizes: cache usage limits and Lambda ephemeral storage stay within AWS bounds."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template
from hypothesis import given, settings
from hypothesis import strategies as st

from fasdl.contract.cache import MAX_ECPU_PER_SECOND
from fasdl.contract.plan import Plan
from infra.cache import ExchangeCache
from infra.cache_limits import MAX_STORAGE_GB, CacheLimits, cache_limits
from infra.compute import MAX_EPHEMERAL_MB, ephemeral_storage_mb, reserved_worker_concurrency
from infra.settings import DEFAULT_PLAN_PATH


def _plan(workers: int, memory_mb: int, model_mb: float, dataset_mb: float) -> Plan:
    data: dict[str, Any] = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["deployment"].update(workers=workers, memory_mb=memory_mb, channel="valkey")
    data["workload"].update(model_mb=model_mb, dataset_mb=dataset_mb, samples=10**6)
    data["training"].update(aggregators=1, max_global_batch=10**6)
    return Plan.from_dict(data)


@pytest.mark.parametrize("workers,memory,model,dataset", [
    (1, 128, 0.01, 0.1), (4, 2048, 0.1, 0.5), (64, 3008, 44.7, 150.0),
    (1000, 10240, 500.0, 1e6)])
def test_limits_within_aws_bounds(workers: int, memory: int, model: float,
                                  dataset: float) -> None:
    plan = _plan(workers, memory, model, dataset)
    limits = cache_limits(plan)
    assert 1 <= limits.storage_gb <= MAX_STORAGE_GB
    assert 1_000 <= limits.ecpu_per_second <= MAX_ECPU_PER_SECOND
    assert 2_048 <= ephemeral_storage_mb(plan) <= MAX_EPHEMERAL_MB


def test_limits_grow_with_the_job() -> None:
    small = cache_limits(_plan(4, 2048, 1.0, 1.0))
    large = cache_limits(_plan(100, 2048, 100.0, 1.0))
    assert large.storage_gb > small.storage_gb
    assert large.ecpu_per_second > small.ecpu_per_second
    assert ephemeral_storage_mb(_plan(2, 2048, 1.0, 20_000.0)) > 2_048


def _predicted(peak: float, mean: float, workers: int = 64) -> Plan:
    data = _plan(workers, 2048, 44.7, 150.0).to_dict()
    data["prediction"] = {"time_s": 100.0, "cost_usd": 1.0, "breakdown": {
        "lambda_compute_usd": 0.5, "cache_ecpu_per_s_peak": peak, "cache_ecpu_per_s_mean": mean}}
    return Plan.from_dict(data)


@settings(max_examples=200, deadline=None)
@given(peak=st.floats(0.0, MAX_ECPU_PER_SECOND), share=st.floats(0.0, 1.0))
def test_the_maximum_covers_the_planned_peak_and_the_minimum_its_mean(peak: float,
                                                                       share: float) -> None:
    """The planner keeps a Valkey plan's peak within 15 M ECPU/s; the deployed maximum is at
    least that peak (with headroom where it fits) and the pre-scaled minimum the mean."""
    mean = peak * share
    limits = cache_limits(_predicted(peak, mean))
    assert peak <= limits.ecpu_per_second <= MAX_ECPU_PER_SECOND
    assert limits.ecpu_per_second >= min(MAX_ECPU_PER_SECOND, 1.5 * peak)
    minimum = limits.ecpu_per_second_minimum
    assert minimum is not None and 1_000 <= minimum <= limits.ecpu_per_second
    assert minimum >= min(mean, limits.ecpu_per_second)


def test_a_plan_without_predicted_rates_keeps_the_network_estimate() -> None:
    plan = _plan(64, 2048, 44.7, 150.0)
    limits = cache_limits(plan)
    # 64 workers at 75 MB/s both ways (2048 MB is over one vCPU)
    assert limits.ecpu_per_second == math.ceil(64 * 75 * 1024 * 2)
    assert limits.ecpu_per_second_minimum is None


def test_the_cache_is_sized_from_the_typed_prediction_fields() -> None:
    """cache_limits reads Prediction.cache_ecpu_per_s_peak/_mean (not breakdown keys), and the
    construct takes only the CacheLimits it is given (keyword-only props)."""
    plan = _predicted(400_000.0, 250_000.0)
    assert plan.prediction is not None
    assert "cache_ecpu_per_s_peak" not in plan.prediction.breakdown
    limits = cache_limits(plan)
    assert (limits.ecpu_per_second, limits.ecpu_per_second_minimum) == (600_000, 250_000)
    stack = Stack(App(), "Sized")
    ExchangeCache(stack, "Cache", limits=CacheLimits(storage_gb=3, ecpu_per_second=5_000,
                                                     ecpu_per_second_minimum=2_000),
                  name="sized-exchange", subnets=[ec2.Subnet.from_subnet_id(stack, "S", "s-1")],
                  security_group=ec2.SecurityGroup.from_security_group_id(stack, "G", "sg-1"))
    Template.from_stack(stack).has_resource_properties("AWS::ElastiCache::ServerlessCache", {
        "CacheUsageLimits": {"DataStorage": {"Maximum": 3, "Unit": "GB"},
                             "ECPUPerSecond": {"Maximum": 5_000, "Minimum": 2_000}}})


def test_an_adaptive_runs_cache_and_concurrency_hold_at_its_ceiling() -> None:
    """deployment.workers_max = 4·W: storage for the ceiling's shards, the ECPU/s maximum the
    planned peak x ceiling / W (with headroom), the minimum still the plan's mean; the
    reserved concurrency 2 x the ceiling."""
    plan = _predicted(400_000.0, 250_000.0, workers=16)
    data = plan.to_dict()
    data["training"]["adaptive"] = "deadline"
    data["deployment"]["workers_max"] = 64
    ceiling = Plan.from_dict(data)
    static, adaptive = cache_limits(plan), cache_limits(ceiling)
    assert adaptive.ecpu_per_second == 4 * static.ecpu_per_second == 2_400_000
    assert adaptive.ecpu_per_second_minimum == static.ecpu_per_second_minimum == 250_000
    assert adaptive.storage_gb > static.storage_gb
    settings = SimpleNamespace(reserve_concurrency=True, plan=ceiling)
    assert reserved_worker_concurrency(settings) == 128  # type: ignore[arg-type]
