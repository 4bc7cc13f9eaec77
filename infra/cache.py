"""ElastiCache Serverless (Valkey 8) for the K-REDUCE exchange, sized from the plan.

Usage limits bound the bill, not the speed: the storage cap holds a few iterations of shards,
the ECPU/s cap allows every worker to move data at full Lambda network speed at once.
ElastiCache bills 1 ECPU per KB transferred.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from constructs import Construct

from fasdl.plan import Plan

ENGINE = "valkey"
MAJOR_VERSION = "8"
CACHE_ID = "ServerlessCache"
MIN_STORAGE_GB = 1
MAX_STORAGE_GB = 5_000
MIN_ECPU_PER_SECOND = 1_000
MAX_ECPU_PER_SECOND = 15_000_000
# Iterations of shards alive at once: l-1 and l under HAP, plus slack for slow deletes.
LIVE_ITERATIONS = 4
# Measured Lambda network ceiling (~75 MB/s) reached at one vCPU (1,769 MB).
WORKER_PEAK_MB_PER_S = 75.0
FULL_VCPU_MEMORY_MB = 1_769
NAME_MAX_LENGTH = 40


@dataclass(frozen=True)
class CacheLimits:
    storage_gb: int
    ecpu_per_second: int


def cache_limits(plan: Plan) -> CacheLimits:
    """Usage caps from the plan: data held (W+1 model copies per iteration) and peak ECPU/s."""
    workers = plan.deployment.workers
    per_iteration_mb = (workers + 1) * plan.workload.model_mb
    storage = math.ceil(LIVE_ITERATIONS * per_iteration_mb / 1024)
    share = min(1.0, plan.deployment.memory_mb / FULL_VCPU_MEMORY_MB)
    kb_per_s = WORKER_PEAK_MB_PER_S * 1024 * share * 2  # upload and download at once
    ecpu = math.ceil(workers * kb_per_s)
    return CacheLimits(
        storage_gb=min(MAX_STORAGE_GB, max(MIN_STORAGE_GB, storage)),
        ecpu_per_second=min(MAX_ECPU_PER_SECOND, max(MIN_ECPU_PER_SECOND, ecpu)),
    )


class ExchangeCache(Construct):
    """A Valkey serverless cache in the isolated subnets, reachable from the worker SG."""

    def __init__(self, scope: Construct, construct_id: str, *, plan: Plan, name: str,
                 subnets: list[ec2.ISubnet], security_group: ec2.ISecurityGroup) -> None:
        super().__init__(scope, construct_id)
        self.limits = cache_limits(plan)
        self.cache = self._build_cache(name, subnets, security_group)

    @property
    def address(self) -> str:
        return self.cache.attr_endpoint_address

    @property
    def port(self) -> str:
        return self.cache.attr_endpoint_port

    def _build_cache(self, name: str, subnets: list[ec2.ISubnet],
                     security_group: ec2.ISecurityGroup) -> elasticache.CfnServerlessCache:
        return elasticache.CfnServerlessCache(
            self, CACHE_ID,
            engine=ENGINE,
            major_engine_version=MAJOR_VERSION,
            serverless_cache_name=name.lower()[:NAME_MAX_LENGTH],
            description="FasDL K-REDUCE exchange (keys carry a TTL)",
            subnet_ids=[subnet.subnet_id for subnet in subnets],
            security_group_ids=[security_group.security_group_id],
            cache_usage_limits=elasticache.CfnServerlessCache.CacheUsageLimitsProperty(
                data_storage=elasticache.CfnServerlessCache.DataStorageProperty(
                    unit="GB", maximum=self.limits.storage_gb),
                ecpu_per_second=elasticache.CfnServerlessCache.ECPUPerSecondProperty(
                    maximum=self.limits.ecpu_per_second),
            ),
        )
