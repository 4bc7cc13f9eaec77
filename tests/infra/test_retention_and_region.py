"""The stack keeps what the planner prices: S3 leftovers expire after the periods it prices
(fasdl.contract.storage_lifecycle, planner/model/terms/storage_cost.py), the cache is pre-scaled to
the ECPU/s minimum it prices, and every stack deploys to the plan's region, whose prices the
plan was made with."""

from __future__ import annotations

import math
from typing import Any

from aws_cdk import Stack

from fasdl.contract.storage_lifecycle import (
    DATASETS_NONCURRENT_DAYS,
    EXCHANGE_EXPIRY_DAYS,
    MULTIPART_ABORT_DAYS,
    RESULTS_NONCURRENT_DAYS,
)
from planner.model.terms.storage_cost import cache_minimum_ecpu_per_s
from tests.infra.conftest import Synth


def _lifecycle(synth: Synth, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (bucket,) = [v["Properties"] for k, v in synth.resources("AWS::S3::Bucket").items()
                 if k.startswith(f"Storage{name}")]
    return bucket, bucket["LifecycleConfiguration"]["Rules"]


def test_every_exchange_object_expires_whatever_its_key(s3_synth: Synth) -> None:
    """No prefix filter: shards a crashed run left expire wherever the key layout put them."""
    _, (rule,) = _lifecycle(s3_synth, "Exchange")
    assert rule == {"Status": "Enabled", "ExpirationInDays": EXCHANGE_EXPIRY_DAYS,
                    "AbortIncompleteMultipartUpload": {
                        "DaysAfterInitiation": MULTIPART_ABORT_DAYS}}
    assert EXCHANGE_EXPIRY_DAYS == 1


def test_pruned_checkpoints_expire_after_a_day_replaced_datasets_after_a_month(
        s3_synth: Synth) -> None:
    """The results bucket is versioned: a checkpoint the trigger prunes stays as a noncurrent
    version, billed, until its rule expires it; then its delete marker goes too."""
    for name, days in (("Results", RESULTS_NONCURRENT_DAYS),
                       ("Datasets", DATASETS_NONCURRENT_DAYS)):
        bucket, (rule,) = _lifecycle(s3_synth, name)
        assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}, name
        assert rule == {"Status": "Enabled",
                        "NoncurrentVersionExpiration": {"NoncurrentDays": days},
                        "ExpiredObjectDeleteMarker": True,
                        "AbortIncompleteMultipartUpload": {
                            "DaysAfterInitiation": MULTIPART_ABORT_DAYS}}, name
    assert (RESULTS_NONCURRENT_DAYS, DATASETS_NONCURRENT_DAYS) == (1, 30)


def test_the_cache_is_pre_scaled_to_the_minimum_the_planner_prices(valkey_synth: Synth) -> None:
    """The plan's predicted peak and mean ECPU/s (tests/infra/plans/valkey_arm64.json; the
    typed Prediction fields) become the cache's maximum (with headroom) and minimum; the
    planner priced that minimum."""
    prediction = valkey_synth.settings.plan.prediction
    assert valkey_synth.cache is not None and prediction is not None
    peak, mean = prediction.cache_ecpu_per_s_peak, prediction.cache_ecpu_per_s_mean
    assert (peak, mean) == (710504.448, 423248.208047)
    ((cache,),) = [list(valkey_synth.cache.resources("AWS::ElastiCache::ServerlessCache").values())]
    limits = cache["Properties"]["CacheUsageLimits"]["ECPUPerSecond"]
    # an adaptive plan's cache serves its ceiling: the peak scaled by ceiling / W
    deployment = valkey_synth.settings.plan.deployment
    assert (deployment.workers, deployment.ceiling) == (8, 16)
    assert limits == {"Maximum": math.ceil(1.5 * peak * 16 / 8), "Minimum": math.ceil(mean)}
    assert limits["Minimum"] == int(cache_minimum_ecpu_per_s(mean))
    assert prediction.breakdown["cache_minimum_usd"] > 0


def test_every_stack_deploys_to_the_plan_region(synth: Synth) -> None:
    region = synth.settings.plan.deployment.region
    assert Stack.of(synth.stack).region == region
    if synth.cache is not None:
        assert synth.cache.stack.region == region
