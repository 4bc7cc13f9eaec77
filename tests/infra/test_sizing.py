"""Plan-derived sizes: cache usage limits and Lambda ephemeral storage stay within AWS bounds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fasdl.contract.plan import Plan
from infra.cache import MAX_ECPU_PER_SECOND, MAX_STORAGE_GB, cache_limits
from infra.compute import MAX_EPHEMERAL_MB, ephemeral_storage_mb
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
