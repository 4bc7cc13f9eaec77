"""ElastiCache Serverless (Valkey 8) for the K-REDUCE exchange, sized from the plan
(infra/cache_limits.py), in its own stack.

``FasdlCacheStack`` holds the cache alone, so ``cdk destroy FasdlCacheStack`` stops its
minimum charge between runs while the training stack stays. It imports the VPC subnets and the
cache security group from the training stack (the dependency points this way only, so the
cache stack can always be deleted); nothing imports from it: the functions know the cache by
its name (:func:`cache_name`) and the trigger looks its endpoint up at run time
(``fasdl.contract.cache``).
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Environment, Fn, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from constructs import Construct

from fasdl.contract.cache import NAME_MAX_LENGTH, cache_name
from infra.cache_limits import CacheLimits

ENGINE = "valkey"
MAJOR_VERSION = "8"
CACHE_ID = "ServerlessCache"
CACHE_CONSTRUCT_ID = "Cache"


class ExchangeCache(Construct):
    """A Valkey serverless cache in the isolated subnets, reachable from the worker SG."""

    def __init__(self, scope: Construct, construct_id: str, *, limits: CacheLimits, name: str,
                 subnets: list[ec2.ISubnet], security_group: ec2.ISecurityGroup) -> None:
        super().__init__(scope, construct_id)
        self.limits = limits
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
                    maximum=self.limits.ecpu_per_second,
                    minimum=self.limits.ecpu_per_second_minimum),
            ),
        )


class FasdlCacheStack(Stack):
    """The exchange cache of one Valkey training stack; deploy it before a run, destroy it
    after to stop its billing."""

    def __init__(self, scope: Construct, construct_id: str, *, region: str, limits: CacheLimits,
                 training_stack_name: str, subnets: list[ec2.ISubnet],
                 security_group: ec2.ISecurityGroup, account: str | None = None) -> None:
        super().__init__(scope, construct_id,
                         env=Environment(account=account, region=region),
                         description=f"FasDL exchange cache of {training_stack_name} "
                                     "(destroy between runs to stop its billing)")
        self.cache = ExchangeCache(self, CACHE_CONSTRUCT_ID, limits=limits,
                                   name=cache_name(training_stack_name), subnets=subnets,
                                   security_group=security_group)
        CfnOutput(self, "CacheName", value=self.cache.cache.serverless_cache_name)
        CfnOutput(self, "CacheEndpoint",
                  value=Fn.join(":", [self.cache.address, self.cache.port]))
