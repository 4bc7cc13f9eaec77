"""Before the first Map: enough Lambda concurrency for the run, and an Active worker function.

The trigger's ``start`` action calls :func:`before_first_map` (also for ``input.resume``: three
cheap GETs, and the account may have changed since the previous execution). Pure logic over a
boto3 ``lambda`` client (fasdl.aws.sessions); boto3 is imported only when a client is built.

**Concurrency.** All W workers run at once and a retried segment can overlap the aborted
attempt's workers, so a run needs 2·W concurrent executions (planner/search/quotas.py). The worker
can
use its reserved concurrency when it has one (GetFunctionConcurrency
``ReservedConcurrentExecutions``), else the account's unreserved pool (GetAccountSettings
``AccountLimit.UnreservedConcurrentExecutions``; ``.ConcurrentExecutions`` is the quota). Less
raises :class:`ConcurrencyQuotaTooLow`, naming the quota, the numbers and how to raise them.
These are limits, not current use: functions running elsewhere in the account still compete.

**Function state** (GetFunctionConfiguration ``State``). ``Active``: go. ``Pending`` (being
created, or its resources being recreated): poll every :data:`POLL_S`, as botocore's
``function_active`` waiter does; invoking a Pending function fails with
ResourceConflictException, which the workflow does not retry. ``Inactive`` (idle long enough for
Lambda to reclaim its resources, e.g. a VPC function's network interfaces): only an invoke
wakes it, and that invoke fails (ResourceNotReadyException) while Lambda sets the function
Pending and recreates them; so one such invoke is sent, then the state is polled, which is what
the CDK's custom-resource provider does (invoke; on failure ``waitUntilFunctionActiveV2`` up to
300 s; invoke again). Not Active within the time left: :class:`WorkerNotReady`, which the
workflow retries. ``Failed``: :class:`WorkerFunctionFailed` with Lambda's reason (redeploy).
``LastUpdateStatus`` is not waited for: during an update the function stays Active and runs
its previous code and configuration.

AWS sources:
https://docs.aws.amazon.com/lambda/latest/api/API_GetAccountSettings.html,
https://docs.aws.amazon.com/lambda/latest/api/API_GetFunctionConcurrency.html,
https://docs.aws.amazon.com/lambda/latest/api/API_GetFunctionConfiguration.html,
https://docs.aws.amazon.com/lambda/latest/dg/functions-states.html (states, waking Inactive),
https://docs.aws.amazon.com/lambda/latest/dg/troubleshooting-invocation.html (Pending invoke),
https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html ("Concurrent
executions", 1,000 by default, lower on new accounts),
https://repost.aws/knowledge-center/lambda-concurrency-limit-increase (raising it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from fasdl.contract.errors import WorkerNotReady
from fasdl.contract.lambda_quotas import EXECUTIONS_PER_WORKER, QUOTA_CODE, QUOTA_NAME

POLL_S = 5.0  # botocore's function_active waiter polls GetFunctionConfiguration every 5 s
MAX_WAIT_S = 90.0  # per trigger invocation; WorkerNotReady hands the rest to a Retry
KEEP_S = 20.0  # of the trigger's remaining time, for the rest of the start action
WAKE_TIMEOUT_S = 10  # an Inactive function refuses at once; never wait for a run

ACTIVE, PENDING, INACTIVE, FAILED = "Active", "Pending", "Inactive", "Failed"
WAKE_EVENT = b'{"action": "wake"}'  # only ever sent to an Inactive function, which refuses it


class ConcurrencyQuotaTooLow(RuntimeError):
    """The worker cannot get 2·W concurrent executions: nothing was started."""


class WorkerFunctionFailed(RuntimeError):
    """Lambda could not set up the worker function (State Failed): redeploy it."""


@dataclass(frozen=True)
class Concurrency:
    """What the worker function may use, and what the run needs."""

    needed: int
    account_limit: int  # AccountLimit.ConcurrentExecutions: the quota
    unreserved: int  # AccountLimit.UnreservedConcurrentExecutions
    reserved: int | None  # the worker's ReservedConcurrentExecutions, None when unset

    @property
    def available(self) -> int:
        return self.unreserved if self.reserved is None else self.reserved


@dataclass(frozen=True)
class FunctionState:
    state: str
    reason_code: str = ""
    reason: str = ""
    last_update: str = ""

    @classmethod
    def of(cls, configuration: Mapping[str, Any]) -> FunctionState:
        return cls(state=str(configuration.get("State", "")),
                   reason_code=str(configuration.get("StateReasonCode", "")),
                   reason=str(configuration.get("StateReason", "")),
                   last_update=str(configuration.get("LastUpdateStatus", "")))

    def describe(self) -> str:
        why = ": ".join(part for part in (self.reason_code, self.reason) if part)
        return f"State {self.state or 'unknown'}" + (f" ({why})" if why else "")


# ---- concurrency ---------------------------------------------------------------------------
def concurrency(client: Any, function: str, workers: int) -> Concurrency:
    limit = client.get_account_settings()["AccountLimit"]
    reserved = client.get_function_concurrency(FunctionName=function).get(
        "ReservedConcurrentExecutions")
    return Concurrency(needed=EXECUTIONS_PER_WORKER * workers,
                       account_limit=int(limit["ConcurrentExecutions"]),
                       unreserved=int(limit["UnreservedConcurrentExecutions"]),
                       reserved=None if reserved is None else int(reserved))


def shortfall(found: Concurrency, function: str) -> str:
    """Why ``found`` is not enough and what to do, with every number."""
    workers = found.needed // EXECUTIONS_PER_WORKER
    head = (f"Lambda concurrency too low for W={workers} workers: a run needs "
            f"2 x W = {found.needed} concurrent executions (a retried segment can overlap the "
            f"aborted attempt's workers), but the worker function {function} can use "
            f"{found.available}")
    if found.reserved is not None:
        return (f"{head}, its reserved concurrency (GetFunctionConcurrency). Reserve at least "
                f"{found.needed}: redeploy with -c reserve_concurrency=true (reserves 2 x W) or "
                f"`aws lambda put-function-concurrency --function-name {function} "
                f"--reserved-concurrent-executions {found.needed}`. Nothing was started.")
    desired = found.account_limit + found.needed - found.unreserved
    return (f"{head}, the account's unreserved concurrency (GetAccountSettings "
            f"UnreservedConcurrentExecutions) of its Lambda quota '{QUOTA_NAME}' = "
            f"{found.account_limit} in this Region (Service Quotas code {QUOTA_CODE}). "
            f"Raise the quota to at least {desired}: Service Quotas console > AWS Lambda > "
            f"{QUOTA_NAME} > Request increase, or `aws service-quotas "
            f"request-service-quota-increase --service-code lambda --quota-code {QUOTA_CODE} "
            f"--desired-value {desired}`; or plan with `--max-concurrency {found.available}` "
            f"(W <= {found.available // EXECUTIONS_PER_WORKER}). Nothing was started.")


def check_concurrency(client: Any, function: str, workers: int) -> Concurrency:
    found = concurrency(client, function, workers)
    if found.available < found.needed:
        raise ConcurrencyQuotaTooLow(shortfall(found, function))
    return found


# ---- function state -----------------------------------------------------------------------
def function_state(client: Any, function: str) -> FunctionState:
    return FunctionState.of(client.get_function_configuration(FunctionName=function))


def wake(invoker: Any, function: str) -> str:
    """Invoke an Inactive function once, which makes Lambda recreate its resources; returns
    what the Invoke API answered (expected: ResourceNotReadyException)."""
    try:
        response = invoker.invoke(FunctionName=function, Payload=WAKE_EVENT)
    except Exception as error:  # the refusal is the point; any answer is only logged
        code = getattr(error, "response", {}).get("Error", {}).get("Code")
        return str(code or type(error).__name__)
    return f"status {response.get('StatusCode')}"


@dataclass(frozen=True)
class Waited:
    state: FunctionState
    polls: int
    woke: str  # what the waking invoke answered; "" when none was sent
    waited_s: float


def wait_until_active(client: Any, function: str, *, budget_s: float, invoker: Any = None,
                      sleep: Callable[[float], None] = time.sleep,
                      clock: Callable[[], float] = time.monotonic) -> Waited:
    """Poll the worker's state until Active (see the module docstring for each state)."""
    began = clock()
    polls, woke = 0, ""
    while True:
        state = function_state(client, function)
        polls += 1
        if state.state == ACTIVE:
            return Waited(state, polls, woke, clock() - began)
        if state.state == FAILED:
            raise WorkerFunctionFailed(
                f"the worker function {function} is in {state.describe()}: Lambda could not "
                "set it up; fix the cause and redeploy (cdk deploy). Nothing was started.")
        if state.state == INACTIVE and not woke:
            woke = wake(invoker or client, function)
        if clock() - began + POLL_S > budget_s:
            waking = f"; a waking invoke answered {woke}" if woke else ""
            raise WorkerNotReady(
                f"the worker function {function} is not Active after {clock() - began:.0f} s "
                f"({polls} polls): {state.describe()}{waking}. Lambda does not invoke a "
                "function before it is Active; the start is retried.")
        sleep(POLL_S)


# ---- the trigger's entry point --------------------------------------------------------------
def lambda_client(*, wake: bool = False) -> Any:
    """A boto3 Lambda client (boto3 reads AWS_ENDPOINT_URL_LAMBDA); ``wake``: one attempt,
    short read timeout, since standard retries would repeat the refused 502."""
    from botocore.config import Config

    from fasdl.aws import sessions

    config = (Config(read_timeout=WAKE_TIMEOUT_S, retries={"total_max_attempts": 1}) if wake
              else Config(retries={"mode": "standard"}))
    return sessions.client("lambda", config=config)


def seconds_left(context: Any) -> float:
    if context is None or not hasattr(context, "get_remaining_time_in_millis"):
        return MAX_WAIT_S + KEEP_S
    return float(context.get_remaining_time_in_millis()) / 1000.0


def before_first_map(workers: int, context: Any, function: str) -> dict[str, Any] | None:
    """Check concurrency, then wait for an Active worker ``function`` (the trigger's
    ``Settings.worker_function``); returns what was found (for the log), or None when the
    environment names no worker function (unit tests, old stacks)."""
    if not function:
        return None
    client = lambda_client()
    found = check_concurrency(client, function, workers)
    budget = min(MAX_WAIT_S, seconds_left(context) - KEEP_S)
    waited = wait_until_active(client, function, budget_s=budget,
                               invoker=lambda_client(wake=True))
    return {"function": function, "concurrency": {**asdict(found),
                                                  "available": found.available},
            **asdict(waited)}
