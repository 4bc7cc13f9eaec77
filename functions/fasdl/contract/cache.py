"""The exchange cache's names and its endpoint as the run state carries it (``run.cache``).

The cache lives in its own stack (``FasdlCacheStack``) so that destroying it between runs
stops its billing without touching the training stack. Its endpoint therefore cannot be baked
into the functions' environment: the trigger looks it up (fasdl.aws.cache_lookup) and puts it in
the run state, which hands it to every worker and to finalize.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypedDict, TypeVar

if TYPE_CHECKING:  # the planner passes arrays of W; the trigger has no numpy
    import numpy as np
    from numpy.typing import NDArray

from fasdl.contract.fields import is_int_in

NAME_MAX_LENGTH = 40  # ElastiCache's limit on a serverless cache's name
# ECPUPerSecond limits of a serverless cache: AWS's API page states none, AWS's CDK reference
# (CacheUsageLimitsProperty) gives 1,000-15,000,000 (planner/model/terms/cache_throughput.py);
# above its maximum a cache throttles
MIN_ECPU_PER_SECOND = 1_000
MAX_ECPU_PER_SECOND = 15_000_000
# The data cap over the exchange's peak: ElastiCache Serverless evicts keys with a TTL (all of
# the exchange's) least-recently-used at its cap, so the cap must never be reached
CACHE_HEADROOM = 1.5
# The longest a plan may wait before its first segment for the cache's pre-scaled minimum
# (prediction.cache_wait_s; AWS: "within 60 minutes"), and how often the state machine asks
# again (infra/workflow.py's retrier covers the whole wait)
MAX_CACHE_WAIT_S = 3_900
CACHE_WAIT_POLL_S = 30


Workers = TypeVar("Workers", float, "NDArray[np.float64]")


def exchange_peak_copies(workers: Workers, *, chunks: int = 1, upload_share: float = 1.0
                         ) -> Workers:
    """Model copies the exchange holds at its peak, in model sizes S_m.

    Live: two iterations of W uploaded shards (at ``upload_share`` of float32's bytes) and the
    merged model (fasdl.exchange.kreduce; three when pipelined in chunks, whose deletes run in
    the background). Leftovers: the epoch before the live one (a finished segment's last two
    merged models, or a failed attempt's live keys at most) until worker 0 of the live epoch
    deletes every older epoch at its start (fasdl.run.fencing.clean_dead_epochs): as much
    again, at most. Zombies (issue 41) do not raise this bound: a zombie of a dead epoch keeps
    its epoch within the same two-iteration window (it deletes its old iterations as it goes),
    writes nothing once its fence check finds it superseded, and then deletes its whole epoch
    (clean_own_dead_epoch). It notices within one fence check (``FASDL_FENCE_CHECK_S``, 10 s)
    plus an iteration, or when its current peer wait ends; an attempt that fails lasts at
    least its survivors' peer wait, so by the time a further epoch is issued the one before
    the dead epoch has no writer left and was deleted: at most one dead epoch holds keys.
    The planner prices this peak and the cache's storage cap is it times the headroom."""
    live_iterations = 2.0 if chunks == 1 else 3.0
    live = live_iterations * (workers * upload_share + 1.0)
    return 2.0 * live


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
