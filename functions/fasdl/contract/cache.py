"""Where the Valkey exchange cache is, found at run time by its name.

The cache lives in its own stack (``FasdlCacheStack``) so that destroying it between runs
stops its billing without touching the training stack. Its endpoint therefore cannot be baked
into the functions' environment (a new cache gets a new endpoint): the trigger, outside the
VPC, looks it up with ElastiCache's ``DescribeServerlessCaches`` on every action and puts it in
the run state (``run.cache``), which hands it to every worker and to finalize. The workers sit
in isolated subnets with no route to the ElastiCache API, and need none.

API: https://docs.aws.amazon.com/AmazonElastiCache/latest/APIReference/API_DescribeServerlessCaches.html
(``ServerlessCaches[].Status``, ``Endpoint.Address``/``Port``; ``ServerlessCacheNotFoundFault``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from fasdl.contract.fields import is_int_in

AVAILABLE = "available"
# A cache being created or changed will be ready soon: the state machine retries the trigger.
TRANSITIONAL = frozenset({"creating", "modifying"})
NOT_FOUND = "ServerlessCacheNotFoundFault"
NAME_MAX_LENGTH = 40  # ElastiCache's limit on a serverless cache's name


def cache_name(stack_name: str) -> str:
    """The serverless cache's name, derived from the training stack's (both stacks use it)."""
    return f"{stack_name}-exchange".lower()[:NAME_MAX_LENGTH]


def cache_stack_name(stack_name: str) -> str:
    """``FasdlStack`` -> ``FasdlCacheStack``; any other name gets ``Cache`` appended."""
    if stack_name.endswith("Stack"):
        return f"{stack_name[:-len('Stack')]}CacheStack"
    return f"{stack_name}Cache"


def deploy_hint(stack_name: str) -> str:
    """How to bring the cache of the training stack ``stack_name`` back."""
    return (f"deploy it with `npx cdk deploy {cache_stack_name(stack_name)} -c plan=plan.json` "
            "(README, \"Costs after a run\": it is destroyed between runs to stop its billing)")


class CacheEndpoint(TypedDict):
    address: str
    port: int


class CacheMissing(RuntimeError):
    """The exchange cache does not exist, or is being deleted or failed: the run cannot start."""


class CacheNotReady(RuntimeError):
    """The exchange cache is being created or modified: the state machine retries later."""


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


def parse(value: object, path: str) -> CacheEndpoint | None:
    """``run.cache`` as the state machine hands it back: null, or an address and a port."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"field '{path}': must be null or an object, got {value!r}")
    address, port = value.get("address"), value.get("port")
    if not isinstance(address, str) or not address:
        raise ValueError(f"field '{path}.address': must be a non-empty string, got {address!r}")
    if not is_int_in(port, 1, 65_535):
        raise ValueError(f"field '{path}.port': must be an integer from 1 to 65535, "
                         f"got {port!r}")
    return {"address": address, "port": port}
