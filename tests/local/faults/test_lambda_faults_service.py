"""Injected Lambda service errors: the first N invocations of a function fail the Invoke call
with the AWS error (nothing runs), the next one runs the handler; through moto's real ASL
interpreter each is the Step Functions error name a Retry or Catch matches."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra import lambda_errors
from local.__main__ import main
from local.aws.adapter import LocalStepFunctions, emulator_router, service_error_response
from local.aws.template import function_arn
from local.faults.injection import InputError
from local.faults.service_faults import (
    KINDS,
    OPTION,
    SERVICE_EXCEPTION,
    ServiceError,
    ServiceFault,
    parse_service_fault,
)
from local.lambda_.emulator import LambdaEmulator
from local.lambda_.invocation import FunctionSpec, Invocation
from tests.local.conftest import STUBS

ARN = function_arn("Fn", "us-east-1")


@pytest.fixture
def calls(tmp_path: Path) -> Path:
    return tmp_path / "calls.txt"


@pytest.fixture
def emulator(calls: Path) -> Iterator[LambdaEmulator]:
    spec = FunctionSpec(name="Fn", handler="lambda_faults_stubs.record", code_dir=STUBS,
                        timeout_s=30, environment={"FAULTS_CALLS_FILE": str(calls)})
    with LambdaEmulator({"Fn": spec}) as emulator:
        yield emulator


def _ran(calls: Path) -> list[str]:
    return calls.read_text().split() if calls.is_file() else []


# ---- the option -----------------------------------------------------------------------------
def test_kinds_are_the_tables_names() -> None:
    assert {kind.name for kind in KINDS.values()} == {
        lambda_errors.THROTTLED, lambda_errors.NOT_READY, lambda_errors.ENI_NOT_READY,
        SERVICE_EXCEPTION, lambda_errors.EC2_THROTTLED, lambda_errors.SUBNET_IP_LIMIT,
        lambda_errors.ENI_LIMIT}
    assert set(lambda_errors.SERVICE_ERRORS) >= {kind.name for kind in KINDS.values()}
    assert SERVICE_EXCEPTION.endswith(".ServiceException")
    assert [KINDS[k].status for k in ("throttled", "not-ready", "service")] == [429, 502, 500]


@pytest.mark.parametrize(("text", "expected"), [
    ("worker:throttled:3", ("worker", lambda_errors.THROTTLED, 3, None)),
    ("trigger:not-ready", ("trigger", lambda_errors.NOT_READY, 1, None)),
    ("finalize:eni-not-ready:1", ("finalize", lambda_errors.ENI_NOT_READY, 1, None)),
    ("worker:service:12", ("worker", SERVICE_EXCEPTION, 12, None)),
    ("trigger@next:service-after-start", ("trigger", SERVICE_EXCEPTION, 1, "next"))])
def test_parse(text: str, expected: tuple[str, str, int, str | None]) -> None:
    fault = parse_service_fault(text)
    assert (fault.function, fault.kind.name, fault.count, fault.action) == expected


@pytest.mark.parametrize("text", ["router:throttled:1", "worker:slow:1", "worker:throttled:0",
                                  "worker:throttled:-1", "worker:throttled:x", "worker",
                                  "worker:throttled:1:2", "trigger@:service", "router@next:service",
                                  ""])
def test_bad_option_names_the_option_and_the_allowed_values(
        text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError) as raised:
        parse_service_fault(text)
    message = str(raised.value)
    assert message.startswith(f"{OPTION} {text!r}: expected FUNCTION[@ACTION]:ERROR[:N]")
    assert "worker, trigger, finalize" in message
    assert "throttled, not-ready, eni-not-ready, service" in message
    assert main(["run", OPTION, text]) == 2  # before any planning, server or worker
    captured = capsys.readouterr()
    assert message in captured.err and "started" not in captured.out


# ---- the emulator ---------------------------------------------------------------------------
def test_first_n_fail_without_running_then_the_handler_runs(
        emulator: LambdaEmulator, calls: Path) -> None:
    emulator.inject_service_error("Fn", "throttled", 2)
    first, second, third = (emulator.invoke(ARN, {"n": n}) for n in range(3))
    for refused in (first, second):
        assert refused.service_error is not None and refused.payload == b""
        assert refused.error_type == lambda_errors.THROTTLED
        assert refused.function_error is None and refused.peak_rss_mb is None
        assert refused.duration_s == 0
        cause = refused.service_error.cause
        assert cause.startswith("Rate Exceeded. (Service: AWSLambda; Status Code: 429; Error "
                                "Code: TooManyRequestsException; Request ID: ")
        assert refused.request_id in cause
    assert third.service_error is None and third.error_type is None
    assert _ran(calls) == [third.request_id]  # no process for the refused two
    assert json.loads(third.payload)["event"] == {"n": 2}
    assert emulator.invocations == [first, second, third]


def test_faults_for_one_function_queue_in_order(emulator: LambdaEmulator, calls: Path) -> None:
    emulator.inject_service_error("Fn", "service")
    emulator.inject_service_error("Fn", KINDS["not-ready"], 1)
    names = [emulator.invoke("Fn", {}).error_type for _ in range(3)]
    assert names == [SERVICE_EXCEPTION, lambda_errors.NOT_READY, None]
    assert len(_ran(calls)) == 1


def test_a_fault_for_an_action_waits_for_an_event_with_it(emulator: LambdaEmulator,
                                                          calls: Path) -> None:
    """bench.chaos's late_trigger: the first ``next`` call fails, not the ``start`` before it;
    a fault for any action queued behind it still takes the first event that comes."""
    emulator.inject_service_error("Fn", "service", action="next")
    emulator.inject_service_error("Fn", "throttled")
    names = [emulator.invoke("Fn", {"action": action}).error_type
             for action in ("start", "outcome", "next", "next")]
    assert names == [lambda_errors.THROTTLED, None, SERVICE_EXCEPTION, None]
    assert len(_ran(calls)) == 2


def test_concurrent_invocations_take_exactly_n(emulator: LambdaEmulator, calls: Path) -> None:
    emulator.inject_service_error("Fn", "eni-not-ready", 2)
    results: list[Invocation] = []
    threads = [threading.Thread(target=lambda: results.append(emulator.invoke("Fn", {})))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    refused = [i for i in results if i.service_error is not None]
    assert len(refused) == 2 and len(_ran(calls)) == 2


def test_bad_injection(emulator: LambdaEmulator) -> None:
    with pytest.raises(KeyError, match="no emulated Lambda function 'Other'"):
        emulator.inject_service_error("Other", "throttled")
    with pytest.raises(ValueError, match="throttled, not-ready, eni-not-ready, service"):
        emulator.inject_service_error("Fn", "slow")
    with pytest.raises(ValueError, match="count"):
        ServiceFault("Fn", KINDS["throttled"], 0)


# ---- the adapter, through moto's interpreter ------------------------------------------------
def test_router_renders_a_service_error() -> None:
    error = ServiceError(KINDS["throttled"], "req-1")
    refused = Invocation("Fn", "req-1", b"", None, error.name, 0.0, 0.0, None,
                         service_error=error)
    route = emulator_router(lambda function, payload: refused)
    assert route("Fn", b"{}") == service_error_response(error.name, error.cause)
    body, function_error = route("Fn", b"{}")
    assert function_error == "Unhandled"
    assert json.loads(body) == {"errorType": lambda_errors.THROTTLED, "errorMessage": error.cause}


def _execute(emulator: LambdaEmulator, definition: dict[str, Any]) -> tuple[
        dict[str, Any], list[dict[str, Any]]]:
    with LocalStepFunctions(emulator_router(emulator.invoke)) as sfn:
        machine = sfn.create("faults", definition)
        sfn.start(machine, "one", {"n": 1})
        (execution,) = sfn.wait(machine, timeout_s=60)
        return execution, sfn.history(execution["executionArn"])


def _failures(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event["lambdaFunctionFailedEventDetails"] for event in history
            if event["type"] == "LambdaFunctionFailed"]


@pytest.mark.parametrize("option", list(KINDS))
def test_catch_sees_the_aws_error_name(emulator: LambdaEmulator, calls: Path,
                                       option: str) -> None:
    kind = KINDS[option]
    definition = {"StartAt": "Call", "States": {
        "Call": {"Type": "Task", "Resource": ARN, "End": True,
                 "Catch": [{"ErrorEquals": [kind.name], "ResultPath": "$.error",
                            "Next": "Caught"}]},
        "Caught": {"Type": "Pass", "End": True}}}
    emulator.inject_service_error("Fn", option)
    execution, history = _execute(emulator, definition)
    assert execution["status"] == "SUCCEEDED", execution
    error = json.loads(execution["output"])["error"]
    assert error["Error"] == kind.name
    cause = json.loads(error["Cause"])["errorMessage"]
    assert cause.startswith(f"{kind.message} (Service: AWSLambda; Status Code: {kind.status}; "
                            f"Error Code: {kind.code}; Request ID: ")
    assert [f["error"] for f in _failures(history)] == [kind.name]
    # the Invoke API refused the call, or (service-after-start) it failed after the handler
    # started, which ran on to its end
    assert len(_ran(calls)) == (0 if kind.after_start_s is None else 1)


def test_retry_on_the_name_then_the_handler_runs(emulator: LambdaEmulator,
                                                 calls: Path) -> None:
    definition = {"StartAt": "Call", "States": {"Call": {
        "Type": "Task", "Resource": ARN, "End": True,
        "Retry": [{"ErrorEquals": [lambda_errors.THROTTLED], "IntervalSeconds": 1,
                   "MaxAttempts": 2, "BackoffRate": 1}]}}}
    emulator.inject_service_error("Fn", "throttled", 2)
    execution, history = _execute(emulator, definition)
    assert execution["status"] == "SUCCEEDED", execution
    assert json.loads(execution["output"])["event"] == {"n": 1}
    assert [f["error"] for f in _failures(history)] == [lambda_errors.THROTTLED] * 2
    assert len(_ran(calls)) == 1
    assert [i.error_type for i in emulator.invocations] == [lambda_errors.THROTTLED] * 2 + [None]


def test_retries_exhausted_fail_the_execution_with_the_name(emulator: LambdaEmulator,
                                                           calls: Path) -> None:
    definition = {"StartAt": "Call", "States": {"Call": {
        "Type": "Task", "Resource": ARN, "End": True,
        "Retry": [{"ErrorEquals": [lambda_errors.THROTTLED], "IntervalSeconds": 1,
                   "MaxAttempts": 1, "BackoffRate": 1}]}}}
    emulator.inject_service_error("Fn", "throttled", 2)
    execution, _ = _execute(emulator, definition)
    assert execution["status"] == "FAILED"
    assert execution["error"] == lambda_errors.THROTTLED
    assert _ran(calls) == []


def test_a_detached_invocation_can_be_waited_for(tmp_path: Path) -> None:
    """An Invoke that failed after the handler started leaves it running (service-after-start):
    drain_detached waits for it to end, as AWS lets it (local/run/run_report.py drains the
    trigger's before the report, so a late trigger call goes on instead of being killed)."""
    spec = FunctionSpec(name="Slow", handler="stub_lambdas.sleepy", code_dir=STUBS,
                        timeout_s=30, environment={"STUB_DIR": str(tmp_path)})
    quick = dataclasses.replace(KINDS["service-after-start"], after_start_s=0.5)
    with LambdaEmulator({"Slow": spec}) as emulator:
        emulator.inject_service_error("Slow", quick)
        failed = emulator.invoke("Slow", {"sleep": 2.0})
        assert failed.service_error is not None
        assert emulator.drain_detached({"Slow"}, 0.0) == 1  # still sleeping
        assert emulator.drain_detached({"Other"}, 30.0) == 0  # not this function's
        assert emulator.drain_detached({"Slow"}, 30.0) == 0
        ran = [i for i in emulator.invocations if i.service_error is None]
        assert len(ran) == 1 and ran[0].error_type is None  # it ran to its end
        assert json.loads(ran[0].payload) == {"slept": 2.0}
