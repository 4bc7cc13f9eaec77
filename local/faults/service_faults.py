"""Service errors of the Lambda Invoke call, injected by the emulator.

A service error is the Invoke API refusing the call (throttled, VPC network not ready, an
internal error), so no handler starts; Step Functions names it ``Lambda.<ExceptionName>``
(infra/lambda_errors.py). The emulator answers the first N invocations of a function with one
(:class:`ServiceError` on the Invocation) and local/aws/adapter.py renders it for moto.

``service-after-start`` fails the call *after* the handler started, which then runs on
unobserved: an internal error (500) reaches the caller ``after_start_s`` later although the
function runs, so the Task's retrier invokes it again and the worker runs twice in one
attempt (``service-after-start-same-id``: the retry even gets the first one's request id).
(Step Functions' own ``States.Timeout`` cannot be emulated here: a function error named
``States.*`` is refused, by Step Functions as by moto, as ``States.Runtime``.)

``python -m local run --inject-service-error FUNCTION[@ACTION]:ERROR[:N]`` (repeatable) sets it
up: FUNCTION is worker, trigger or finalize; ERROR one of :data:`KINDS`; N (default 1) how many
of that function's next invocations fail; with ``@ACTION`` only invocations whose event has
that ``action`` count (``trigger@next``: the first ``next`` call, not the ``start`` before it).
Several for one function queue in the order given.

Messages and HTTP statuses are the Invoke API's (https://docs.aws.amazon.com/lambda/latest/
api/API_Invoke.html, Errors); the cause is worded as Step Functions shows a service error:
"<message> (Service: AWSLambda; Status Code: 429; Error Code: TooManyRequestsException;
Request ID: ...; Proxy: null)".
"""

from __future__ import annotations

from dataclasses import dataclass

from infra import lambda_errors
from local.faults.injection import ROLES, InputError

OPTION = "--inject-service-error"


@dataclass(frozen=True)
class ServiceErrorKind:
    """One Invoke API error as the injection option spells it and AWS reports it."""

    option: str  # the ERROR of --inject-service-error
    name: str  # the Error name in Step Functions (infra/lambda_errors.py)
    status: int  # HTTP status of the Invoke API's error response
    message: str  # the API's message
    after_start_s: float | None = None  # the handler starts and runs on (module doc)
    same_request_id: bool = False  # the retry that follows gets the same request id

    @property
    def code(self) -> str:
        """The API's error code: ``TooManyRequestsException``."""
        return self.name.removeprefix("Lambda.")


SERVICE_EXCEPTION = lambda_errors.TRANSIENT[0]  # Lambda.ServiceException, the 500 of the API
KINDS: dict[str, ServiceErrorKind] = {kind.option: kind for kind in (
    ServiceErrorKind("throttled", lambda_errors.THROTTLED, 429, "Rate Exceeded."),
    ServiceErrorKind("not-ready", lambda_errors.NOT_READY, 502,
                     "The function is inactive and its VPC connection is no longer available. "
                     "Wait for the VPC connection to reestablish and try again."),
    ServiceErrorKind("eni-not-ready", lambda_errors.ENI_NOT_READY, 502,
                     "Lambda couldn't invoke the Lambda function because the elastic network "
                     "interface (ENI) configured for its VPC connection isn't ready yet. Wait a "
                     "few moments and try the request again."),
    ServiceErrorKind("service", SERVICE_EXCEPTION, 500,
                     "The Lambda service encountered an internal error."),
    # 10 s: long enough for the worker to start and claim its slot on a busy machine
    ServiceErrorKind("service-after-start", SERVICE_EXCEPTION, 500,
                     "The Lambda service encountered an internal error.", after_start_s=10.0),
    # the same, and the retried Invoke runs under the first one's request id: a duplicate
    # that only a claim token beyond the request id refuses (fasdl.run.fencing)
    ServiceErrorKind("service-after-start-same-id", SERVICE_EXCEPTION, 500,
                     "The Lambda service encountered an internal error.", after_start_s=10.0,
                     same_request_id=True),
    # a VPC function's network could not be set up: retried, and not
    ServiceErrorKind("ec2-throttled", lambda_errors.EC2_THROTTLED, 502,
                     "Amazon EC2 throttled Lambda during Lambda function initialization using "
                     "the execution role provided for the function."),
    ServiceErrorKind("subnet-ip-limit", lambda_errors.SUBNET_IP_LIMIT, 502,
                     "Lambda couldn't set up VPC access for the Lambda function because one or "
                     "more configured subnets has no available IP addresses."),
    ServiceErrorKind("eni-limit", lambda_errors.ENI_LIMIT, 502,
                     "Lambda couldn't create an elastic network interface in the VPC, specified "
                     "as part of Lambda function configuration, because the limit for network "
                     "interfaces has been reached."),
)}


@dataclass(frozen=True)
class ServiceError:
    """An invocation the Invoke API refused: no process ran."""

    kind: ServiceErrorKind
    request_id: str

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def cause(self) -> str:
        return (f"{self.kind.message} (Service: AWSLambda; Status Code: {self.kind.status}; "
                f"Error Code: {self.kind.code}; Request ID: {self.request_id}; Proxy: null)")


@dataclass(frozen=True)
class ServiceFault:
    """The next ``count`` invocations of ``function`` fail with ``kind``. ``function`` is a
    function name for the emulator, a role (worker, trigger, finalize) from the CLI."""

    function: str
    kind: ServiceErrorKind
    count: int = 1
    action: str | None = None  # only events with this action (None: any)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a service fault needs count >= 1, got {self.count}")


def kind_named(option: str) -> ServiceErrorKind:
    try:
        return KINDS[option]
    except KeyError:
        raise ValueError(f"unknown service error {option!r}: expected one of "
                         f"{', '.join(KINDS)}") from None


def parse_service_fault(text: str) -> ServiceFault:
    """``FUNCTION[@ACTION]:ERROR[:N]`` → a fault for the role FUNCTION (InputError: exit 2)."""
    parts = text.split(":")
    count = parts[2] if len(parts) == 3 else "1"
    role, _, action = parts[0].partition("@")
    if (len(parts) not in (2, 3) or role not in ROLES or parts[1] not in KINDS
            or not count.isdigit() or int(count) < 1 or ("@" in parts[0] and not action)):
        raise InputError(f"{OPTION} {text!r}: expected FUNCTION[@ACTION]:ERROR[:N] with "
                         f"FUNCTION one of {', '.join(ROLES)}, ERROR one of {', '.join(KINDS)} "
                         "and N an integer >= 1 (default 1)")
    return ServiceFault(role, KINDS[parts[1]], int(count), action or None)
