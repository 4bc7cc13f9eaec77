"""Where the Valkey exchange cache is, found at run time by its name.

The trigger, outside the VPC, looks the cache up with ElastiCache's ``DescribeServerlessCaches``
on every action (a new cache gets a new endpoint). The workers sit in isolated subnets with no
route to the ElastiCache API, and need none.

API: https://docs.aws.amazon.com/AmazonElastiCache/latest/APIReference/API_DescribeServerlessCaches.html
(``ServerlessCaches[].Status``, ``Endpoint.Address``/``Port``; ``ServerlessCacheNotFoundFault``).
"""

from __future__ import annotations

from typing import Any

from fasdl.contract.cache import CacheEndpoint, deploy_hint
from fasdl.contract.errors import CacheMissing, CacheNotReady

AVAILABLE = "available"
# A cache being created or changed will be ready soon: the state machine retries the trigger.
TRANSITIONAL = frozenset({"creating", "modifying"})
NOT_FOUND = "ServerlessCacheNotFoundFault"


def locate(client: Any, name: str, stack_name: str = "FasdlStack") -> CacheEndpoint:
    """The endpoint of the serverless cache ``name`` (of the training stack ``stack_name``)
    once it is available."""
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
    endpoint = cache.get("Endpoint") or {}
    address, port = endpoint.get("Address"), endpoint.get("Port")
    if not isinstance(address, str) or not address or not isinstance(port, int):
        raise CacheMissing(f"the exchange cache {name!r} reports no endpoint ({endpoint!r})")
    return {"address": address, "port": port}
