"""Where the Valkey exchange cache is, found at run time by its name.

The trigger, outside the VPC, looks the cache up with ElastiCache's ``DescribeServerlessCaches``
on every action (a new cache gets a new endpoint). The workers sit in isolated subnets with no
route to the ElastiCache API, and need none.

API: https://docs.aws.amazon.com/AmazonElastiCache/latest/APIReference/API_DescribeServerlessCaches.html
(``ServerlessCaches[].Status``, ``Endpoint.Address``/``Port``, ``CreateTime``,
``CacheUsageLimits.ECPUPerSecond.Minimum``; ``ServerlessCacheNotFoundFault``).

A plan that waits for the stack's pre-scaled ECPU/s minimum (``prediction.cache_wait_s``,
planner/model/terms/cost_model.py) starts its first segment only once the cache is that old:
AWS says a minimum is in force "within 60 minutes" and names no field that tells when, so the
cache's age is what the trigger can read (:func:`seconds_until_prescaled`); a cache without a
minimum (deployed from another plan) has nothing to wait for and fails the run with the deploy
command.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fasdl.contract.cache import CacheEndpoint, deploy_hint
from fasdl.contract.errors import CacheMissing, CacheNotReady, CacheWarming

AVAILABLE = "available"
# A cache being created or changed will be ready soon: the state machine retries the trigger.
TRANSITIONAL = frozenset({"creating", "modifying"})
NOT_FOUND = "ServerlessCacheNotFoundFault"


def locate(client: Any, name: str, stack_name: str = "FasdlStack") -> CacheEndpoint:
    """The endpoint of the serverless cache ``name`` (of the training stack ``stack_name``)
    once it is available."""
    cache = _available(client, name, stack_name)
    endpoint = cache.get("Endpoint") or {}
    address, port = endpoint.get("Address"), endpoint.get("Port")
    if not isinstance(address, str) or not address or not isinstance(port, int):
        raise CacheMissing(f"the exchange cache {name!r} reports no endpoint ({endpoint!r})")
    return {"address": address, "port": port}


def seconds_until_prescaled(client: Any, name: str, *, wait_s: float, now: float,
                            stack_name: str = "FasdlStack") -> float:
    """Raise :class:`CacheWarming` while the available cache ``name`` is younger than
    ``wait_s`` (module docstring); else how long ago it reached that age (<= 0 never)."""
    cache = _available(client, name, stack_name)
    limits = (cache.get("CacheUsageLimits") or {}).get("ECPUPerSecond") or {}
    if not isinstance(limits.get("Minimum"), int) or limits["Minimum"] <= 0:
        raise CacheMissing(f"the exchange cache {name!r} has no pre-scaled ECPU/s minimum "
                           f"(CacheUsageLimits {limits or 'none'}), which the plan waits for; "
                           f"{deploy_hint(stack_name)} from this plan")
    created = cache.get("CreateTime")
    if not isinstance(created, datetime) or created.tzinfo is None:
        raise CacheMissing(f"the exchange cache {name!r} reports no CreateTime ({created!r}): "
                           "its age, which the plan waits on, is unknown")
    left = created.timestamp() + wait_s - now
    if left > 0:
        raise CacheWarming(f"the exchange cache {name!r} was created "
                           f"{created.isoformat(timespec='seconds')}; the plan waits until it is "
                           f"{wait_s:,.0f} s old, when its pre-scaled ECPU/s minimum is in force "
                           f"(prediction.cache_wait_s): {left:,.0f} s left, retrying")
    return -left


def _available(client: Any, name: str, stack_name: str) -> dict[str, Any]:
    """The cache's DescribeServerlessCaches entry once it is available."""
    hint = deploy_hint(stack_name)
    try:
        caches = client.describe_serverless_caches(ServerlessCacheName=name)["ServerlessCaches"]
    except Exception as error:
        code = getattr(error, "response", {}).get("Error", {}).get("Code")
        if code == NOT_FOUND:
            raise CacheMissing(f"the exchange cache {name!r} does not exist; "
                               f"{hint}") from error
        raise
    if not caches:
        raise CacheMissing(f"the exchange cache {name!r} does not exist; {hint}")
    cache = caches[0]
    status = str(cache.get("Status", "")).lower()
    if status in TRANSITIONAL:
        raise CacheNotReady(f"the exchange cache {name!r} is {status}; retrying until it is "
                            f"{AVAILABLE}")
    if status != AVAILABLE:
        raise CacheMissing(f"the exchange cache {name!r} is {status or 'in no known state'}, "
                           f"not {AVAILABLE}; {hint}")
    return dict(cache)
