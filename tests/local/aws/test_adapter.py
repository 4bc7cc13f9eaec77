"""The synthesized state machine in moto's ASL interpreter, every Lambda call run by the
emulator (one process each) with stub handlers: the Choice loop, Retry with backoff, the Catch
path, concurrent Map iterations and the timeout -> shorten path. Fails loudly if moto moved."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from infra import lambda_errors, segment_states, workflow
from local.aws import adapter
from local.aws.adapter import MotoAdapterError
from local.aws.template import LocalTemplate, function_arn
from tests.local.stub_workflow import (
    HANG_TIMEOUT_S,
    WORKER_TIMEOUT_S,
    run_stub_workflow,
    stub_calls,
    stub_emulator,
)


def test_loop_runs_every_segment_with_concurrent_workers(
        default_template: LocalTemplate, scratch: Path) -> None:
    with stub_emulator(default_template, scratch, STUB_SEGMENTS="3") as emulator:
        (execution,) = run_stub_workflow(emulator, default_template.definition, {"run_id": "loop"})
    assert execution["status"] == "SUCCEEDED", execution
    assert json.loads(execution["output"])["run_id"] == "loop"
    calls = stub_calls(scratch)
    assert [c["kind"] for c in calls if not c["kind"].startswith("worker")] == [
        "trigger.start", "trigger.next", "trigger.next", "trigger.next", "finalize.succeeded"]
    workers = [c for c in calls if c["kind"] == "worker.train"]
    assert len(workers) == 4 * 3
    # warm sandboxes: four concurrent workers need four, reused by every later segment; one
    # trigger and one finalize sandbox
    assert len({c["pid"] for c in workers}) == 4 and len({c["pid"] for c in calls}) == 6
    # Every worker rendezvoused, so all four ran at once; the context is Lambda-like.
    assert all(0 < c["remaining_ms"] <= WORKER_TIMEOUT_S * 1000 for c in workers)
    assert {c["memory"] for c in workers} == {default_template.functions[
        default_template.function_named("handlers.worker")].memory_mb}
    assert len({c["request_id"] for c in calls}) == len(calls)


def test_continue_as_new_carries_the_run(default_template: LocalTemplate,
                                         scratch: Path) -> None:
    definition = json.loads(json.dumps(default_template.definition))
    for choice in definition["States"][workflow.MORE_SEGMENTS]["Choices"]:
        if "NumericGreaterThanEquals" in choice:
            choice["NumericGreaterThanEquals"] = 2  # continue after two segments
    with stub_emulator(default_template, scratch, STUB_SEGMENTS="3") as emulator:
        first, second = run_stub_workflow(emulator, definition, {"run_id": "long"})
    assert first["status"] == second["status"] == "SUCCEEDED"
    assert json.loads(second["input"])["resume"]["segment"]["index"] == 2
    assert json.loads(second["output"])["run_id"] == "long"
    indices = [c["event"]["segment"]["index"] for c in stub_calls(scratch)
               if c["kind"] == "worker.train"]
    assert sorted(set(indices)) == [0, 1, 2] and len(indices) == 12


def test_rendezvous_fails_without_concurrency(default_template: LocalTemplate,
                                              scratch: Path) -> None:
    """Control for the test above: the stub really needs all W at once (MaxConcurrency 1)."""
    definition = json.loads(json.dumps(default_template.definition))
    definition["States"][workflow.TRAIN_SEGMENT]["MaxConcurrency"] = 1
    with stub_emulator(default_template, scratch, STUB_RENDEZVOUS_S="1") as emulator:
        (execution,) = run_stub_workflow(emulator, definition, {})
    assert execution["status"] == "FAILED"
    failed = [c for c in stub_calls(scratch) if c["kind"] == "finalize.failed"]
    assert failed[0]["event"]["state"]["error"]["Error"] == "RuntimeError"


def test_timeout_kills_the_worker_and_shortens(default_template: LocalTemplate,
                                               scratch: Path) -> None:
    with stub_emulator(default_template, scratch, worker_timeout_s=HANG_TIMEOUT_S,
                   STUB_SEGMENTS="2", STUB_HANG_AT="1:2") as emulator:
        (execution,) = run_stub_workflow(emulator, default_template.definition, {})
        timed_out = [i for i in emulator.invocations if i.timed_out]
    assert execution["status"] == "SUCCEEDED", execution
    (killed,) = timed_out
    assert killed.error_type == lambda_errors.TIMEOUT
    # killed at its timeout, never before; the upper bound only tells that from the stub's
    # 3600 s hang (a loaded machine delays the kill by far less than another timeout)
    assert HANG_TIMEOUT_S <= killed.duration_s < 2 * HANG_TIMEOUT_S
    assert json.loads(killed.payload)["errorMessage"].endswith(
        f"Task timed out after {HANG_TIMEOUT_S:.2f} seconds")
    calls = stub_calls(scratch)
    (shorten,) = [c for c in calls if c["kind"] == "trigger.shorten"]
    assert shorten["event"]["error"]["Error"] == segment_states.SEGMENT_TIMEOUT_ERROR
    retried = [c["event"]["segment"] for c in calls
               if c["kind"] == "worker.train" and c["event"]["segment"]["attempt"] == 1]
    assert len(retried) == 4 and all(s["iterations"] == 4 for s in retried)


def test_handler_error_takes_the_catch_path(default_template: LocalTemplate,
                                            scratch: Path) -> None:
    with stub_emulator(default_template, scratch, STUB_CRASH_AT="0:1") as emulator:
        (execution,) = run_stub_workflow(emulator, default_template.definition, {"run_id": "bad"})
    assert execution["status"] == "FAILED"
    assert execution["error"] == workflow.RUN_FAILED_ERROR
    calls = stub_calls(scratch)
    assert [c["kind"] for c in calls if c["kind"].startswith(("trigger", "finalize"))] == [
        "trigger.start", "finalize.failed"]
    error = calls[-1]["event"]["state"]["error"]
    assert error["Error"] == "ValueError"  # errorType = the exception class, like Lambda
    assert "worker crashed on purpose" in error["Cause"]


def test_retry_backs_off(default_template: LocalTemplate, scratch: Path) -> None:
    """A Task that fails transiently twice is retried after 1 s, then 2 s (real sleeps)."""
    definition = {"StartAt": "Flaky", "States": {"Flaky": {
        "Type": "Task", "Resource": function_arn("Flaky", "us-east-1"),
        "Parameters": {"failures": 2}, "End": True,
        "Retry": [{"ErrorEquals": ["TransientError"], "IntervalSeconds": 1,
                   "MaxAttempts": 3, "BackoffRate": 2}]}}}
    with stub_emulator(default_template, scratch) as emulator:
        (execution,) = run_stub_workflow(emulator, definition, {})
        invocations = sorted(emulator.invocations, key=lambda i: i.started)
    assert execution["status"] == "SUCCEEDED", execution
    assert json.loads(execution["output"]) == {"calls": 3}
    assert len(stub_calls(scratch)) == 3
    # Each wait runs from an invocation's end to the next one's start: the sandbox's cold
    # start and the handler are outside it, so load adds only moto's dispatch (ms). Never
    # shorter than its interval; shorter than the next step's, which a wrong rate would reach.
    waits = [later.started - (earlier.started + earlier.duration_s)
             for earlier, later in itertools.pairwise(invocations)]
    assert 1.0 <= waits[0] < 2.0 and 2.0 <= waits[1] < 4.0, waits


def test_task_timeout_is_states_timeout(default_template: LocalTemplate,
                                        scratch: Path) -> None:
    """A Task's TimeoutSeconds shorter than the function's: the interpreter raises
    States.Timeout (the other error "Run worker" catches) and the Catch sees it."""
    definition = {"StartAt": "Slow", "States": {
        "Slow": {"Type": "Task", "Resource": function_arn("Sleepy", "us-east-1"),
                 "Parameters": {"sleep": 3}, "TimeoutSeconds": 1, "End": True,
                 "Catch": [{"ErrorEquals": ["States.Timeout"], "ResultPath": "$.error",
                            "Next": "Caught"}]},
        "Caught": {"Type": "Pass", "End": True}}}
    with stub_emulator(default_template, scratch) as emulator:
        (execution,) = run_stub_workflow(emulator, definition, {})
    assert execution["status"] == "SUCCEEDED", execution
    assert json.loads(execution["output"])["error"]["Error"] == "States.Timeout"
    # It did not wait for the handler: the execution ended before the handler's 3 s sleep
    # did. Measured from the handler's own start, so the cold start before it (load's
    # part) is excluded; 1 s after the Task began the interpreter had ~2 s to spare.
    (sleepy,) = [c for c in stub_calls(scratch) if c["kind"] == "sleepy"]
    assert execution["stopDate"].timestamp() < sleepy["time"] + 3


def test_unsupported_moto_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    import moto

    adapter.check_moto()  # the pinned version passes
    monkeypatch.setattr(moto, "__version__", "5.3.0")
    with pytest.raises(MotoAdapterError, match=r"supports moto==5\.2\.5 only"):
        adapter.check_moto()


def test_moved_internals_fail_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.awslambda_simple.models import LambdaSimpleBackend

    def invoke(self: object, function_name: str, body: str) -> bytes:
        return b""

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", invoke)
    with pytest.raises(MotoAdapterError, match="changed signature"):
        adapter.check_moto()


def test_service_errors_need_errortype_naming(monkeypatch: pytest.MonkeyPatch) -> None:
    """Injected service errors rely on moto naming a function error after its errorType."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
        state_task_lambda,
    )

    def from_error(self: object, env: object, ex: Exception) -> None:
        return None

    monkeypatch.setattr(state_task_lambda.StateTaskLambda, "_from_error", from_error)
    with pytest.raises(MotoAdapterError, match="errorType"):
        adapter.check_moto()


def test_patches_are_removed_on_exit() -> None:
    from moto.awslambda_simple.models import LambdaSimpleBackend

    original = LambdaSimpleBackend.invoke
    with adapter.routed_lambdas(lambda name, body: (b"{}", None)):
        assert LambdaSimpleBackend.invoke is not original
    assert LambdaSimpleBackend.invoke is original
