"""Run the synthesized state machine in moto's ASL interpreter with fake Lambdas that follow
fasdl/contract/events.py: proves the loop, the timeout -> shorten path, the crash -> retry path, the
failure path and continue-as-new, without AWS. moto 5.2.5 has no public hook to run handler
code, so ``LambdaSimpleBackend.invoke`` is patched (the verified approach in
toolchain-verified.md f).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service_sfn,
)

from infra import segment_states, workflow
from tests.infra.conftest import Synth, is_distributed_map, state_machine_definition
from tests.infra.moto_workflow import (
    SEGMENTS,
    FakeLambdas,
    WorkerExit,
    WorkerTimeout,
    execute_machine,
)


@pytest.fixture
def fake_lambdas(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeLambdas]]:
    installed: list[FakeLambdas] = []

    def invoke(self: object, function_name: str, qualifier: object, body: str,
               headers: object, response_headers: dict[str, str]) -> bytes:
        try:
            return json.dumps(installed[0](function_name, json.loads(body))).encode()
        except WorkerTimeout:
            error = {"errorType": "Sandbox.Timedout", "errorMessage": "Task timed out"}
        except WorkerExit:
            error = {"errorType": "Runtime.ExitError", "errorMessage": "exit status 137"}
        except RuntimeError as crash:
            error = {"errorType": "RuntimeError", "errorMessage": str(crash)}
        response_headers["x-amz-function-error"] = "Unhandled"
        return json.dumps(error).encode()

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", invoke)
    yield installed


@pytest.fixture(params=["inline", "distributed"])
def machine(request: pytest.FixtureRequest, s3_synth: Synth,
            small_distributed: Synth) -> dict[str, Any]:
    """The W = 4 machine with an inline Map, and with a Distributed Map
    (``-c inline_map_max_workers=2``): each failure must be handled alike."""
    return state_machine_definition(s3_synth if request.param == "inline"
                                    else small_distributed)


def _is_distributed(definition: dict[str, Any]) -> bool:
    return is_distributed_map(definition["States"][workflow.TRAIN_SEGMENT])


def test_segments_loop_and_a_timeout_shortens(machine: dict[str, Any],
                                              fake_lambdas: list[FakeLambdas]) -> None:
    fake = FakeLambdas(4, timeout_at=(1, 2))
    fake_lambdas.append(fake)
    (execution,) = execute_machine(machine, {})
    assert execution["status"] == "SUCCEEDED", execution
    assert json.loads(execution["output"])["model_key"] == "runs/run-1/model.npz"
    assert fake.actions() == ["Trigger.start", "Trigger.next", "Trigger.shorten",
                              "Trigger.next", "Trigger.next", "Finalize.succeeded"]
    # one summary per Distributed Map: 3 segments + the shortened attempt
    assert fake.summaries() == (4 if _is_distributed(machine) else 0)
    workers = [event for action, event in fake.calls if action == "Worker.train"]
    # moto starts no more iterations once one failed: under load the timed-out attempt may
    # have invoked fewer than 4 workers
    failed = [w for w in workers if (w["segment"]["index"], w["segment"]["attempt"]) == (1, 0)]
    assert 1 <= len(failed) <= 4 and len(workers) - len(failed) == 4 * SEGMENTS
    retried = [w["segment"] for w in workers if w["segment"]["attempt"] == 1]
    assert retried and all(s["iterations"] == 4 and s["index"] == 1 for s in retried)


def test_a_dead_worker_reruns_the_segment(machine: dict[str, Any],
                                          fake_lambdas: list[FakeLambdas]) -> None:
    fake = FakeLambdas(4, exit_at=(1, 3))
    fake_lambdas.append(fake)
    (execution,) = execute_machine(machine, {})
    assert execution["status"] == "SUCCEEDED", execution
    assert fake.actions() == ["Trigger.start", "Trigger.next", "Trigger.retry",
                              "Trigger.next", "Trigger.next", "Finalize.succeeded"]
    (retry,) = [event for action, event in fake.calls if action == "Trigger.retry"]
    assert retry["error"]["Error"] == segment_states.WORKER_CRASHED_ERROR
    rerun = [e["segment"] for a, e in fake.calls if a == "Worker.train"
             and e["segment"]["attempt"] == 1]
    assert len(rerun) == 4 and all(s["iterations"] == 8 and s["index"] == 1 for s in rerun)


def test_worker_error_records_failure(machine: dict[str, Any],
                                      fake_lambdas: list[FakeLambdas]) -> None:
    fake = FakeLambdas(4, crash_at=(0, 1))
    fake_lambdas.append(fake)
    (execution,) = execute_machine(machine, {"run_id": "bad"})
    assert execution["status"] == "FAILED"
    assert execution["error"] == workflow.RUN_FAILED_ERROR
    assert fake.actions() == ["Trigger.start", "Finalize.failed"]
    (failed,) = [event for action, event in fake.calls if action == "Finalize.failed"]
    assert failed["state"]["run"]["run_id"] == "bad"
    error = failed["state"]["error"]
    if _is_distributed(machine):  # the child's status names the worker and the kind
        assert error["Error"] == segment_states.WORKER_FAILED_ERROR
        assert error["Cause"].startswith("Worker(s) [1] failed")
        outcome = failed["state"]["outcome"]
        assert outcome["workers"] == {"out_of_memory": [], "failed": [1], "timed_out": [],
                                      "crashed": []}
        assert outcome["occurred"] == {"out_of_memory": False, "failed": True,
                                       "timed_out": False, "crashed": False}
    else:  # the inline Map fails with the worker's own error
        assert error["Error"] == "RuntimeError"


@pytest.fixture
def sfn_integration_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto 5.2.5 hands the documented ASL keys ("Input", "StateMachineArn") to botocore
    unchanged, and botocore wants "input"/"stateMachineArn"; AWS accepts the ASL form."""
    service = state_task_service_sfn.StateTaskServiceSfn
    original = service._normalise_parameters

    def normalise(self: Any, parameters: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        original(self, parameters, *args, **kwargs)
        for key in [k for k in parameters if k[:1].isupper()]:
            parameters[key[0].lower() + key[1:]] = parameters.pop(key)

    monkeypatch.setattr(service, "_normalise_parameters", normalise)


@pytest.mark.usefixtures("sfn_integration_keys")
def test_continue_as_new_carries_the_run(s3_synth: Synth,
                                         fake_lambdas: list[FakeLambdas]) -> None:
    definition = copy.deepcopy(state_machine_definition(s3_synth))
    for choice in definition["States"][workflow.MORE_SEGMENTS]["Choices"]:
        if "NumericGreaterThanEquals" in choice:
            choice["NumericGreaterThanEquals"] = 2  # continue after two segments
    fake = FakeLambdas(2)
    fake_lambdas.append(fake)
    first, second = execute_machine(definition, {})
    assert first["status"] == second["status"] == "SUCCEEDED"
    resumed = json.loads(second["input"])["resume"]
    assert resumed["segment"]["index"] == 2 and resumed["run_id"] == "run-1"
    assert json.loads(second["output"])["run_id"] == "run-1"
    indices = [e["segment"]["index"] for a, e in fake.calls if a == "Worker.train"]
    assert sorted(set(indices)) == [0, 1, 2]
