"""The errors the state machine matches by name (its Retry and Catch rules, infra/), raised by
the handlers, the runtime's one dataset error, and the advice an out-of-memory failure carries.
Infra imports these names from here, so a rename breaks the synth, not a run."""

from __future__ import annotations

import math


class WorkerFenced(RuntimeError):
    """This invocation's epoch is no longer the run's: it stops and writes nothing more."""


class FenceWentBack(RuntimeError):
    """The run's fence is below this worker's epoch, or gone: the store lost writes, so nothing
    it holds is trusted; the segment fails (never retried on it)."""


class FenceConflict(RuntimeError):
    """Another trigger action issued an epoch after this one read the fence: this action's run
    state is stale (a retried Invoke's first copy, or a second execution of the run)."""


class RunExists(RuntimeError):
    """Another execution owns this run id (its plan.json is there): a second start is refused
    before it writes anything; the state machine fails it without touching the owner's run."""


class WorkerDuplicate(RuntimeError):
    """Another invocation already trains this worker in this epoch."""


class WorkerNotReady(RuntimeError):
    """The worker function is not Active yet; the state machine retries the start."""


class CacheMissing(RuntimeError):
    """The exchange cache does not exist, or is being deleted or failed: the run cannot start."""


class CacheNotReady(RuntimeError):
    """The exchange cache is being created or modified: the state machine retries later."""


class CacheWarming(RuntimeError):
    """The plan waits for the cache's pre-scaled minimum, and the cache is younger than the
    wait: the state machine retries the start later (fasdl.aws.cache_lookup)."""


class DatasetError(ValueError):
    """A dataset file or object is missing, malformed or does not match its partner; the
    message names it. One class for the trigger's header check (fasdl.run.dataset_check, stdlib
    only), the workers' reader and the importers (fasdl.training.data, fasdl.datasets)."""


def next_memory_mb(memory_mb: int) -> int:
    """A quarter more, on Lambda's 128-MB grid the planner uses, at most 10,240 MB."""
    return min(10_240, math.ceil(memory_mb * 1.25 / 128) * 128)


def same_size_advice(memory_mb: int) -> str:
    """What to do after an out-of-memory kill at ``memory_mb`` (also in the state machine's
    own out-of-memory cause, infra/segment_states.py)."""
    return (f"Retrying at the same size would fail again: set deployment.memory_mb to "
            f"{next_memory_mb(memory_mb)} in plan.json (or re-profile the workload, "
            f"docs/profiling.md) and deploy again.")


# The VPC errors of Lambda's Invoke call that no retry cures (API_Invoke.html, all HTTP 502:
# Lambda could not set up the function's network interfaces in the VPC), as Step Functions
# names them, and what to do. infra/lambda_errors.py lists them (not retried); finalize writes
# the advice into failure.json beside the error (fasdl.run.results).
SUBNET_IP_LIMIT = "Lambda.SubnetIPAddressLimitReachedException"
ENI_LIMIT = "Lambda.ENILimitReachedException"
VPC_FAILURE_ADVICE: dict[str, str] = {
    SUBNET_IP_LIMIT:
        "the subnets have no free IP addresses for Lambda's network interfaces: use larger "
        "subnets, or fewer workers",
    ENI_LIMIT:
        "the VPC has reached its quota of network interfaces (Lambda quotas: 'Elastic "
        "network interfaces per VPC', shared with other services): delete unused ones or "
        "request a higher quota, or use fewer workers",
    "Lambda.EC2AccessDeniedException":
        "the function's execution role lacks the EC2 permissions a VPC function needs "
        "(AWSLambdaVPCAccessExecutionRole): deploy the stack again (cdk deploy)",
    "Lambda.InvalidSubnetIDException":
        "a subnet of the function's VPC configuration does not exist: deploy the stack "
        "again (cdk deploy)",
    "Lambda.InvalidSecurityGroupIDException":
        "a security group of the function's VPC configuration does not exist: deploy the "
        "stack again (cdk deploy)",
}


def failure_advice(error: object) -> str | None:
    """What to do about a run that failed with ``error`` (a Step Functions error name), when
    the name alone does not say; None otherwise."""
    return VPC_FAILURE_ADVICE.get(error) if isinstance(error, str) else None
