"""The exchange cache's usage limits from the plan, without the CDK (the local runner sizes its
Valkey with them, and importing aws_cdk starts a Node process).

Usage limits bound the bill, not the speed: the storage cap holds a few iterations of shards;
all sized for the most workers the run may use (an adaptive run's ``deployment.workers_max``);
the ECPU/s maximum is the plan's predicted peak (``Prediction.cache_ecpu_per_s_peak``,
planner/model/terms/cache_throughput.py) with ECPU_HEADROOM, and its minimum the plan's mean ECPU/s
(``Prediction.cache_ecpu_per_s_mean``), to pre-scale the cache (CacheUsageLimits accepts a
Minimum for DataStorage and ECPUPerSecond:
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-elasticache-serverlesscache-ecpupersecond.html).
AWS says a minimum takes effect within 60 minutes and not whether one given at creation is in
force when the cache turns available, so the planner charges a fresh cache's ramp unless told
the cache is warm (planner/model/terms/cache_ramp.py).
The minimum is billed while the cache exists, one more reason to destroy it between runs. A plan
without a prediction (``-c workload=`` drops it) gets the network estimate: every worker at full
Lambda network speed at once, and no minimum. ElastiCache bills 1 ECPU per KB transferred.
:func:`cache_limits` turns the plan into :class:`CacheLimits`; the constructs (infra/cache.py)
take only those.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fasdl.contract.cache import (
    CACHE_HEADROOM,
    MAX_ECPU_PER_SECOND,
    MIN_ECPU_PER_SECOND,
    exchange_peak_copies,
)
from fasdl.contract.plan import UPLOAD_BYTES_PER_VALUE, Plan

# DataStorage limits: "Minimum data storage size (1 GB)", "Maximum data storage size (5000 GB)"
# (AWS's CDK reference, aws_cdk.aws_elasticache_alpha.CacheUsageLimitsProperty, 2026-11-30)
MIN_STORAGE_GB = 1
MAX_STORAGE_GB = 5_000
# Measured Lambda network ceiling (~75 MB/s) reached at one vCPU (1,769 MB).
WORKER_PEAK_MB_PER_S = 75.0
FULL_VCPU_MEMORY_MB = 1_769
# The maximum over the plan's predicted peak: the prediction is a model, and ElastiCache
# throttles above the maximum; the planner keeps the peak itself within MAX_ECPU_PER_SECOND.
ECPU_HEADROOM = 1.5


@dataclass(frozen=True)
class CacheLimits:
    storage_gb: int
    ecpu_per_second: int  # the maximum
    ecpu_per_second_minimum: int | None = None  # pre-scaled to the plan's mean, when known


def exchange_peak_mb(plan: Plan) -> float:
    """The MB the plan's exchange holds at its peak (fasdl.contract.cache)."""
    training = plan.training
    copies = exchange_peak_copies(
        plan.deployment.ceiling, chunks=training.exchange_chunks,
        upload_share=UPLOAD_BYTES_PER_VALUE[training.exchange_dtype] / 4)
    return copies * plan.workload.model_mb


def cache_limits(plan: Plan) -> CacheLimits:
    """Usage limits from the plan: the exchange's peak data with headroom; ECPU/s from the
    plan's predicted peak (maximum) and mean (minimum), or the network estimate without them."""
    storage = math.ceil(CACHE_HEADROOM * exchange_peak_mb(plan) / 1024)
    prediction = plan.prediction
    peak = prediction.cache_ecpu_per_s_peak if prediction is not None else None
    mean = prediction.cache_ecpu_per_s_mean if prediction is not None else None
    ecpu = (math.ceil(ECPU_HEADROOM * peak * ceiling_factor(plan)) if peak is not None
            else network_ecpu_per_second(plan))
    maximum = _ecpu_in_range(ecpu)
    return CacheLimits(
        storage_gb=min(MAX_STORAGE_GB, max(MIN_STORAGE_GB, storage)),
        ecpu_per_second=maximum,
        ecpu_per_second_minimum=(None if mean is None
                                 else min(maximum, _ecpu_in_range(math.ceil(mean)))),
    )


def ceiling_factor(plan: Plan) -> float:
    """ceiling / W: an adaptive run may scale out to ``deployment.workers_max`` workers at the
    plan's global batch, and the exchange's ECPU/s grows with the workers moving shards (the
    per-worker rate taken as the plan's; the re-plan keeps its candidates within the
    deployed maximum, planner/adapt/replan.py)."""
    return plan.deployment.ceiling / plan.deployment.workers


def network_ecpu_per_second(plan: Plan) -> int:
    """Every worker moving data at full Lambda network speed, both ways at once."""
    share = min(1.0, plan.deployment.memory_mb / FULL_VCPU_MEMORY_MB)
    kb_per_s = WORKER_PEAK_MB_PER_S * 1024 * share * 2  # upload and download at once
    return math.ceil(plan.deployment.ceiling * kb_per_s)


def _ecpu_in_range(ecpu: int) -> int:
    return min(MAX_ECPU_PER_SECOND, max(MIN_ECPU_PER_SECOND, ecpu))
