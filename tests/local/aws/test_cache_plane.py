"""local/aws/cache_plane.py through boto3's real ElastiCache client and fasdl/contract/cache.py:
the local answers parse as AWS's do, for each state of the cache stack."""

from __future__ import annotations

import argparse
import time
from typing import Any

import boto3
import pytest

from fasdl.aws.cache_lookup import locate, seconds_until_prescaled
from fasdl.contract.errors import CacheMissing, CacheNotReady, CacheWarming
from local.aws.cache_plane import CacheStackState, LocalElastiCache

NAME = "fasdlstack-exchange"


def _client(api: LocalElastiCache) -> Any:
    return boto3.client("elasticache", region_name="us-east-1", endpoint_url=api.endpoint_url,
                        aws_access_key_id="x", aws_secret_access_key="y")


def test_deployed_cache_is_found() -> None:
    with LocalElastiCache(NAME, 6390, CacheStackState()) as api:
        assert locate(_client(api), NAME) == {"address": "127.0.0.1", "port": 6390}
        with pytest.raises(CacheMissing, match="'other' does not exist"):
            locate(_client(api), "other")


def test_absent_cache_stack_fails_with_the_deploy_command() -> None:
    with LocalElastiCache(NAME, 6390, CacheStackState.parse("absent")) as api, \
            pytest.raises(CacheMissing, match="npx cdk deploy FasdlCacheStack"):
        locate(_client(api), NAME)


def test_cache_being_created_is_not_ready_then_available() -> None:
    with LocalElastiCache(NAME, 6390, CacheStackState.parse("creating:2")) as api:
        for _ in range(2):
            with pytest.raises(CacheNotReady, match="creating"):
                locate(_client(api), NAME)
        assert locate(_client(api), NAME)["port"] == 6390
        assert api.lookups == 3


LIMITS = {"Maximum": 1_065_757, "Minimum": 423_249}  # what a stack deploys (the snapshot's)


def test_a_plan_waits_until_the_cache_is_as_old_as_its_wait() -> None:
    """CreateTime, as boto3 parses the local answer, against the plan's cache_wait_s: a
    younger cache raises CacheWarming with the seconds left, an older one says since when; a
    cache without a pre-scaled minimum has nothing to wait for."""
    with LocalElastiCache(NAME, 6390, CacheStackState.parse("age:3500"), LIMITS) as api:
        client = _client(api)
        with pytest.raises(CacheWarming, match=r"waits until it is 3,600 s old.* 10\d s left"):
            seconds_until_prescaled(client, NAME, wait_s=3_600.0, now=time.time())
        ready_for = seconds_until_prescaled(client, NAME, wait_s=3_400.0, now=time.time())
        assert 99.0 <= ready_for <= 110.0
    with LocalElastiCache(NAME, 6390, CacheStackState(), LIMITS) as api:  # a day ago
        assert seconds_until_prescaled(_client(api), NAME, wait_s=3_600.0,
                                       now=time.time()) > 80_000
    for limits in (None, {"Maximum": 1_065_757}):
        with LocalElastiCache(NAME, 6390, CacheStackState(), limits) as api, \
                pytest.raises(CacheMissing, match=r"has no pre-scaled ECPU/s minimum.*"
                                                  r"npx cdk deploy FasdlCacheStack"):
            seconds_until_prescaled(_client(api), NAME, wait_s=3_600.0, now=time.time())
    with LocalElastiCache(NAME, 6390, CacheStackState.parse("creating:1"), LIMITS) as api, \
            pytest.raises(CacheNotReady):
        seconds_until_prescaled(_client(api), NAME, wait_s=3_600.0, now=time.time())


def test_the_age_counts_from_the_first_lookup_not_from_the_server_start() -> None:
    """A runner that starts slowly under load must not age the cache past what was asked."""
    with LocalElastiCache(NAME, 6390, CacheStackState.parse("age:3500"), LIMITS) as api:
        time.sleep(1.5)
        first = time.time()
        with pytest.raises(CacheWarming, match=r" 10\d s left"):
            seconds_until_prescaled(_client(api), NAME, wait_s=3_600.0, now=first)


@pytest.mark.parametrize("text", ["", "creating", "creating:0", "creating:x", "gone", "age:",
                                  "age:-5", "age:x"])
def test_bad_cache_stack_option_names_the_choices(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--cache-stack must be one of"):
        CacheStackState.parse(text)
