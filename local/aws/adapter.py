"""The ONE module that knows moto's internals: Step Functions runs in moto's ASL interpreter and
every Lambda invocation it makes is routed to a callable (the local emulator).

moto 5.2.5 executes real ASL (``stepfunctions.execute_state_machine``) but, without Docker, its
Lambda backend (``LambdaSimpleBackend``) only echoes payloads; there is no public hook to run
code, so ``LambdaSimpleBackend.invoke`` is replaced while :class:`LocalStepFunctions` is open.
Map iterations run on one thread each, up to MaxConcurrency (inline and, by inheritance,
Distributed Map; checked below), so W workers that wait on each other do run at once. Also
patched: moto passes the ASL keys of the ``states:startExecution`` integration ("Input",
"StateMachineArn") to botocore unchanged, which wants them lower camel case (Continue as new).

Service errors (an injected ``Lambda.TooManyRequestsException``...): Step Functions names the
failure after the Invoke API's exception, but moto's ``StateTaskLambda._from_error`` names any
botocore ClientError ``Exception``; it names a function error after its ``errorType``. So
:func:`service_error_response` answers as a function error whose errorType is the AWS name and
whose errorMessage is AWS's cause text: the Task fails with exactly that Error, and its Cause
is ``{"errorType": ..., "errorMessage": "<AWS's cause>"}`` where AWS gives the text alone.
Any other moto version, or moved internals, is refused with :class:`MotoAdapterError` before
anything runs.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, cast

from local.aws.interrupts import raise_if_interrupted

if TYPE_CHECKING:
    from moto.core.config import DefaultConfig

    from local.lambda_.invocation import Invocation

SUPPORTED_MOTO_VERSION = "5.2.5"
MOTO_CONFIG: dict[str, Any] = {"stepfunctions": {"execute_state_machine": True},
                               "lambda": {"use_docker": False}}
ROLE_ARN = "arn:aws:iam::123456789012:role/fasdl-local-states"
_INVOKE_PARAMS = ["self", "function_name", "qualifier", "body", "headers", "response_headers"]
_INLINE_MAP = ("moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration."
               "inline_iteration_component")
_DISTRIBUTED_MAP = _INLINE_MAP.replace("inline_iteration", "distributed_iteration")
_SFN_SERVICE = ("moto.stepfunctions.parser.asl.component.state.exec.state_task.service."
                "state_task_service_sfn")
_LAMBDA_TASK = "moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda"
_BATCH_TASK = _SFN_SERVICE.replace("_sfn", "_batch")

# (function name or ARN, request payload) -> (response payload, "Unhandled" or None)
LambdaRouter = Callable[[str, bytes], tuple[bytes, str | None]]


class MotoAdapterError(RuntimeError):
    """moto is not the version, or no longer has the internals, this adapter patches."""


def _fail(what: str) -> MotoAdapterError:
    return MotoAdapterError(
        f"local/aws/adapter.py supports moto=={SUPPORTED_MOTO_VERSION} only: {what}. Pin "
        f"moto[server]=={SUPPORTED_MOTO_VERSION} (pyproject.toml) or port local/aws/adapter.py "
        "to the new internals and rerun tests/local/aws/test_adapter.py")


def _targets() -> tuple[type[Any], type[Any]]:
    """The two moto classes patched, after checking the version and their shape."""
    import importlib

    import moto

    if moto.__version__ != SUPPORTED_MOTO_VERSION:
        raise _fail(f"found moto {moto.__version__}")
    _without_batch_tasks()
    try:
        from moto.awslambda_simple.models import LambdaSimpleBackend

        inline_map = importlib.import_module(_INLINE_MAP)
        distributed_map = importlib.import_module(_DISTRIBUTED_MAP)
        sfn_service = importlib.import_module(_SFN_SERVICE).StateTaskServiceSfn
    except (ImportError, AttributeError) as error:
        raise _fail(f"an internal module moved ({error})") from error
    params = list(inspect.signature(LambdaSimpleBackend.invoke).parameters)
    if params != _INVOKE_PARAMS:
        raise _fail(f"LambdaSimpleBackend.invoke{tuple(params)} changed signature")
    if not callable(getattr(sfn_service, "_normalise_parameters", None)):
        raise _fail("StateTaskServiceSfn._normalise_parameters is gone")
    try:  # service errors rely on this: a function error is named after its errorType
        from_error = inspect.getsource(
            importlib.import_module(_LAMBDA_TASK).StateTaskLambda._from_error)
    except (ImportError, AttributeError, OSError) as error:
        raise _fail(f"StateTaskLambda._from_error moved ({error})") from error
    if 'cause_object["errorType"]' not in from_error:
        raise _fail("StateTaskLambda._from_error no longer names a failure by its errorType")
    inline = inline_map.InlineIterationComponent
    launch = getattr(inline, "_launch_worker", None)
    if launch is None or "threading.Thread" not in inspect.getsource(launch):
        raise _fail("inline Map iterations no longer run on their own threads")
    distributed = distributed_map.DistributedIterationComponent
    if not issubclass(distributed, inline) or distributed._launch_worker is not launch:
        raise _fail("Distributed Map iterations no longer use the threaded inline launcher")
    return LambdaSimpleBackend, sfn_service


def _without_batch_tasks() -> None:
    """moto's ASL parser imports its AWS Batch task, which imports moto.batch and with it all of
    moto.ec2: about 3.5 s of CPU in every local run's process, for a task type none of this
    app's state machines has. A stand-in takes its place unless it was imported already."""
    import sys
    import types

    if _BATCH_TASK in sys.modules:
        return

    class StateTaskServiceBatch:
        def __init__(self) -> None:
            raise MotoAdapterError("local/aws/adapter.py runs no AWS Batch task (arn:aws:"
                                   "states:::batch:*): the local state machines have none")

    stand_in = types.ModuleType(_BATCH_TASK)
    stand_in.StateTaskServiceBatch = StateTaskServiceBatch  # type: ignore[attr-defined]
    sys.modules[_BATCH_TASK] = stand_in


def check_moto() -> None:
    """Raise :class:`MotoAdapterError` unless this adapter can drive the installed moto."""
    _targets()


@contextmanager
def routed_lambdas(router: LambdaRouter) -> Iterator[None]:
    """While open, every Lambda invocation moto makes goes to ``router``."""
    backend, sfn_service = _targets()
    original_invoke = backend.invoke
    original_normalise = sfn_service._normalise_parameters

    def invoke(self: object, function_name: str, qualifier: object, body: Any,
               headers: object, response_headers: dict[str, str]) -> bytes:
        payload = body.encode() if isinstance(body, str) else bytes(body or b"")
        result, function_error = router(function_name, payload)
        if function_error:
            response_headers["x-amz-function-error"] = function_error
        return result

    def normalise(self: Any, parameters: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        original_normalise(self, parameters, *args, **kwargs)
        for key in [k for k in parameters if k[:1].isupper()]:
            parameters[key[0].lower() + key[1:]] = parameters.pop(key)

    backend.invoke = invoke
    sfn_service._normalise_parameters = normalise
    try:
        yield
    finally:
        backend.invoke = original_invoke
        sfn_service._normalise_parameters = original_normalise


class LocalStepFunctions:
    """moto's Step Functions (in-process, ASL executed) with Lambdas routed to ``router``.

    Only AWS endpoints are mocked: boto3 calls to a local S3 server's loopback URL pass
    through, so the runner can watch the results bucket meanwhile.
    """

    def __init__(self, router: LambdaRouter, *, region: str = "us-east-1") -> None:
        self.router = router
        self.region = region
        self._stack = ExitStack()
        self._client: Any = None

    def __enter__(self) -> LocalStepFunctions:
        from moto import mock_aws

        check_moto()
        try:
            self._stack.enter_context(mock_aws(config=cast("DefaultConfig", MOTO_CONFIG)))
            self._stack.enter_context(routed_lambdas(self.router))
            import boto3

            self._client = boto3.client("stepfunctions", region_name=self.region)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    @property
    def client(self) -> Any:
        if self._client is None:
            raise RuntimeError("LocalStepFunctions is not open")
        return self._client

    def create(self, name: str, definition: dict[str, Any]) -> str:
        return str(self.client.create_state_machine(
            name=name, definition=json.dumps(definition), roleArn=ROLE_ARN)["stateMachineArn"])

    def start(self, machine_arn: str, name: str, run_input: dict[str, Any]) -> str:
        # Always named: moto names unnamed executions "None", so a second one would collide.
        return str(self.client.start_execution(stateMachineArn=machine_arn, name=name,
                                               input=json.dumps(run_input))["executionArn"])

    def executions(self, machine_arn: str) -> list[dict[str, Any]]:
        listed = self.client.list_executions(stateMachineArn=machine_arn)["executions"]
        return [self.client.describe_execution(executionArn=e["executionArn"])
                for e in sorted(listed, key=lambda e: e["startDate"])]

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.client.get_execution_history(
            executionArn=execution_arn, maxResults=1000)["events"]
        return events

    def wait(self, machine_arn: str, *, timeout_s: float, poll_s: float = 0.2,
             on_poll: Callable[[], None] | None = None) -> list[dict[str, Any]]:
        """Wait until no execution of the machine runs (continue-as-new included)."""
        deadline = time.monotonic() + timeout_s
        while True:
            listed = self.client.list_executions(stateMachineArn=machine_arn)["executions"]
            if listed and all(e["status"] != "RUNNING" for e in listed):
                return self.executions(machine_arn)
            raise_if_interrupted()  # a Ctrl-C that a moto request swallowed
            if on_poll is not None:
                on_poll()
            if time.monotonic() > deadline:
                raise TimeoutError(f"executions still running after {timeout_s:.0f} s")
            time.sleep(poll_s)

    def stop_all(self, machine_arn: str) -> None:
        for execution in self.client.list_executions(stateMachineArn=machine_arn,
                                                     statusFilter="RUNNING")["executions"]:
            self.client.stop_execution(executionArn=execution["executionArn"],
                                       error="FasDL.Interrupted", cause="stopped locally")


def service_error_response(name: str, cause: str) -> tuple[bytes, str]:
    """The response that moto 5.2.5 reports as the service error ``name`` (module docstring)."""
    return json.dumps({"errorType": name, "errorMessage": cause}).encode(), "Unhandled"


def emulator_router(invoke: Callable[[str, bytes], Invocation]) -> LambdaRouter:
    """Adapt ``LambdaEmulator.invoke`` (returns an Invocation) to a :data:`LambdaRouter`."""

    def route(function: str, payload: bytes) -> tuple[bytes, str | None]:
        invocation = invoke(function, payload)
        if invocation.service_error is not None:
            return service_error_response(invocation.service_error.name,
                                          invocation.service_error.cause)
        return invocation.payload, invocation.function_error

    return route
