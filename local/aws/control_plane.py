"""A local Lambda control plane: the Lambda API calls the trigger makes before the first Map
(fasdl/aws/account.py), answered as AWS answers them, from a model of the account and the worker.

Routes (REST-JSON, the URIs of botocore's lambda service model); the trigger reaches them
through ``AWS_ENDPOINT_URL_LAMBDA``:

* ``GET /2016-08-19/account-settings`` (GetAccountSettings): ``AccountLimit.ConcurrentExecutions``
  = ``--account-concurrency`` N, ``UnreservedConcurrentExecutions`` = N minus the worker's
  reserved concurrency;
* ``GET /2019-09-30/functions/{name}/concurrency`` (GetFunctionConcurrency): the template's
  ``ReservedConcurrentExecutions`` of the worker, ``{}`` without one;
* ``GET /2015-03-31/functions/{name}/configuration`` (GetFunctionConfiguration): ``State``,
  ``StateReasonCode``, ``StateReason`` from ``--worker-state``;
* ``POST /2015-03-31/functions/{name}/invocations`` (Invoke): through the emulator.

Errors carry AWS's status, ``x-amzn-ErrorType`` and ``{"Type": "User", "message": ...}``.

``--worker-state`` (see functions-states.html): ``active`` (default); ``pending[:N]`` Pending
(``Creating``) for the first N GetFunctionConfiguration calls, then Active; ``inactive[:N]``
Inactive (``Idle``) until the worker is invoked: that invoke fails with
ResourceNotReadyException and the function turns Pending (``Restoring``) for N calls, then
Active; ``failed`` Failed for good (``SubnetOutOfIPAddresses``). N defaults to
:data:`DEFAULT_POLLS`. The emulator asks :meth:`WorkerFunction.refusal` before every invocation,
so a worker invoked while not Active is refused as on AWS: Inactive with
ResourceNotReadyException, Pending (or Failed) with ResourceConflictException. The reason texts
are this model's; AWS documents the codes, not the wording.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from fasdl.aws.account import ACTIVE, FAILED, INACTIVE, PENDING, POLL_S
from fasdl.contract.lambda_quotas import DEFAULT_ACCOUNT_CONCURRENCY, MIN_UNRESERVED_CONCURRENCY
from infra import lambda_errors
from local.aws.loopback import LoopbackServer, Reply, Request
from local.faults.injection import InputError
from local.faults.service_faults import KINDS, ServiceErrorKind

if TYPE_CHECKING:
    from local.aws.template import LocalTemplate
    from local.lambda_.invocation import Invocation

DEFAULT_POLLS = 2
STATES = {"active": ACTIVE, "pending": PENDING, "inactive": INACTIVE, "failed": FAILED}
REASONS = {PENDING: ("Creating", "The function is being created."),
           "restoring": ("Restoring", "The function's resources are being recreated."),
           INACTIVE: ("Idle", "The function has been idle and its resources were reclaimed."),
           FAILED: ("SubnetOutOfIPAddresses",
                    "The function's VPC subnets have no free IP addresses.")}
ACCOUNT_OPTION, WORKER_OPTION = "--account-concurrency", "--worker-state"
_ROUTE = re.compile(r"^/(?P<version>[\d-]+)/functions/(?P<name>[^/]+)/(?P<what>[a-z]+)$")


@dataclass(frozen=True)
class AccountOptions:
    """The knobs of ``python -m local run``: the account's concurrency, the worker's state."""

    concurrency: int = DEFAULT_ACCOUNT_CONCURRENCY
    worker_state: str = ACTIVE
    polls: int = 0  # Pending polls (pending: from the start; inactive: after the wake)


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--account-concurrency`` and ``--worker-state`` of ``python -m local run``."""
    parser.add_argument(ACCOUNT_OPTION, type=int, default=DEFAULT_ACCOUNT_CONCURRENCY,
                        metavar="N",
                        help="the account's Lambda 'Concurrent executions' quota the trigger "
                             f"sees (GetAccountSettings; default {DEFAULT_ACCOUNT_CONCURRENCY}); "
                             "below 2·W the run fails before any worker starts")
    parser.add_argument(WORKER_OPTION, default="active", metavar="STATE",
                        help="the worker function's State the trigger sees "
                             "(GetFunctionConfiguration): active (default); pending[:N] "
                             "Pending for N polls, then Active; inactive[:N] Inactive until "
                             "invoked (that invoke fails, as on AWS), then Pending for N "
                             f"polls; failed (N default {DEFAULT_POLLS}; polls are "
                             f"{POLL_S:.0f} s apart)")


def parse_account(concurrency: int, worker_state: str) -> AccountOptions:
    """The two options as given on the command line (InputError: exit 2)."""
    if concurrency < 1:
        raise InputError(f"{ACCOUNT_OPTION} must be >= 1, got {concurrency}")
    name, colon, count = worker_state.partition(":")
    counted = name in ("pending", "inactive")
    polls = int(count) if count.isdigit() else (DEFAULT_POLLS if counted and not colon else -1)
    if name not in STATES or (colon and not counted) or (counted and polls < 0):
        raise InputError(f"{WORKER_OPTION} {worker_state!r}: expected active, pending[:N], "
                         "inactive[:N] or failed, N a whole number of polls "
                         f"(default {DEFAULT_POLLS})")
    return AccountOptions(concurrency, STATES[name], max(polls, 0))


class WorkerFunction:
    """The account's concurrency and the worker function's state, changed by polls and
    invokes as AWS changes them; thread-safe."""

    def __init__(self, name: str, options: AccountOptions, reserved: int | None) -> None:
        self.name = name
        self.options = options
        self.reserved = reserved
        self.state = options.worker_state
        self.reason = REASONS.get(self.state, ("", ""))
        self._pending_polls = options.polls if self.state == PENDING else 0
        self._lock = threading.Lock()

    @classmethod
    def of(cls, template: LocalTemplate, options: AccountOptions,
           worker_handler: str) -> WorkerFunction:
        """The worker of ``template``; InputError when its reservation could not exist in an
        account of ``options.concurrency`` (Lambda keeps 100 unreserved)."""
        name = template.function_named(worker_handler)
        reserved = template.functions[name].reserved_concurrency
        if reserved is not None and \
                options.concurrency - reserved < MIN_UNRESERVED_CONCURRENCY:
            raise InputError(f"{ACCOUNT_OPTION} {options.concurrency}: the stack reserves "
                             f"{reserved} for the worker, which Lambda allows only with at "
                             f"least {reserved + MIN_UNRESERVED_CONCURRENCY} in the account")
        return cls(name, options, reserved)

    def account_settings(self) -> dict[str, Any]:
        limit = self.options.concurrency
        return {"AccountLimit": {"TotalCodeSize": 80_530_636_800,
                                 "CodeSizeUnzipped": 262_144_000, "CodeSizeZipped": 52_428_800,
                                 "ConcurrentExecutions": limit,
                                 "UnreservedConcurrentExecutions": limit - (self.reserved or 0)},
                "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 4}}

    def concurrency(self) -> dict[str, Any]:
        return {} if self.reserved is None else {"ReservedConcurrentExecutions": self.reserved}

    def configuration(self, region: str) -> dict[str, Any]:
        """One GetFunctionConfiguration: a Pending function counts its polls down."""
        with self._lock:
            if self.state == PENDING and self._pending_polls <= 0:
                self.state, self.reason = ACTIVE, ("", "")
            elif self.state == PENDING:
                self._pending_polls -= 1
            state, (code, reason) = self.state, self.reason
        answer = {"FunctionName": self.name, "Version": "$LATEST", "State": state,
                  "FunctionArn": f"arn:aws:lambda:{region}:123456789012:function:{self.name}",
                  "LastUpdateStatus": "Successful", "PackageType": "Zip"}
        return {**answer, "StateReasonCode": code, "StateReason": reason} if code else answer

    def refusal(self, function: str) -> ServiceErrorKind | None:
        """How the Invoke API refuses ``function`` now, or None: it runs. Invoking an Inactive
        worker fails and starts recreating its resources (Pending)."""
        if function != self.name:
            return None
        with self._lock:
            state = self.state
            if state == INACTIVE:
                self.state, self.reason = PENDING, REASONS["restoring"]
                self._pending_polls = self.options.polls
        if state == ACTIVE:
            return None
        if state == INACTIVE:
            return KINDS["not-ready"]
        return ServiceErrorKind("conflict", lambda_errors.CONFLICT, 409,
                                "The operation cannot be performed at this time. The function "
                                f"is currently in the following state: {state}")


class ControlPlane(LoopbackServer):
    """The HTTP server of the routes above, on a free loopback port, while open."""

    title = "Lambda control plane"

    def __init__(self, worker: WorkerFunction, *, region: str = "us-east-1") -> None:
        super().__init__()
        self.worker = worker
        self.region = region
        self._invoke: Callable[[str, bytes], Invocation] | None = None

    def describe(self) -> str:
        options = self.worker.options
        return (f"Lambda control plane at {self.endpoint_url} (account concurrency "
                f"{options.concurrency}, worker {self.worker.state})")

    def route_invocations(self, invoke: Callable[[str, bytes], Invocation]) -> None:
        """Invoke calls run ``invoke`` (LambdaEmulator.invoke), refusals included."""
        self._invoke = invoke

    # ---- one request ----------------------------------------------------------------------
    def answer(self, request: Request) -> Reply:
        method, path, body = request.method, request.path, request.body
        if method == "GET" and path.rstrip("/") == "/2016-08-19/account-settings":
            return _json(200, self.worker.account_settings())
        route = _ROUTE.match(path)
        if route is None:
            return _error(404, "UnknownOperationException", f"no local route for {path}")
        name, what = unquote(route["name"]).split(":function:")[-1], route["what"]
        if name != self.worker.name and (self._invoke is None or what != "invocations"):
            return _error(404, "ResourceNotFoundException", f"Function not found: {name}")
        if method == "GET" and what == "configuration":
            return _json(200, self.worker.configuration(self.region))
        if method == "GET" and what == "concurrency":
            return _json(200, self.worker.concurrency())
        if method == "POST" and what == "invocations":
            return self._invocation(name, body)
        return _error(404, "UnknownOperationException", f"no local route for {method} {path}")

    def _invocation(self, name: str, body: bytes) -> Reply:
        if self._invoke is None:
            refused = self.worker.refusal(name)
            return (_error(refused.status, refused.code, refused.message) if refused
                    else (200, {}, b"null"))
        try:
            done = self._invoke(name, body)
        except KeyError as error:
            return _error(404, "ResourceNotFoundException", str(error))
        if done.service_error is not None:
            kind = done.service_error.kind
            return _error(kind.status, kind.code, kind.message)
        headers = {"X-Amz-Executed-Version": "$LATEST"}
        if done.function_error:
            headers["X-Amz-Function-Error"] = done.function_error
        return 200, headers, done.payload


def _json(status: int, data: dict[str, Any]) -> Reply:
    return status, {"Content-Type": "application/json"}, json.dumps(data).encode()


def _error(status: int, code: str, message: str) -> Reply:
    status, headers, body = _json(status, {"Type": "User", "message": message})
    return status, {**headers, "x-amzn-ErrorType": code}, body
