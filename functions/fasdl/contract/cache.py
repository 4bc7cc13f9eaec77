"""The exchange cache's names and its endpoint as the run state carries it (``run.cache``).

The cache lives in its own stack (``FasdlCacheStack``) so that destroying it between runs
stops its billing without touching the training stack. Its endpoint therefore cannot be baked
into the functions' environment: the trigger looks it up (fasdl.aws.cache_lookup) and puts it in
the run state, which hands it to every worker and to finalize.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from fasdl.contract.fields import is_int_in

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


def parse_endpoint(value: object, path: str) -> CacheEndpoint | None:
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
