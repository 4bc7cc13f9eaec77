"""Deadline and budget guards through the synthesized state machine (fasdl.run.guards,
infra/guard_states.py).

* ``python -m local run --budget-usd 0.0001`` end to end (real servers, real workers): the
  first segment alone costs more, so the trigger's ``next`` stops the run before the second
  one: status BUDGET_EXCEEDED, exit 1, the first segment's checkpoint still in S3, and the
  report names it and the resume command. The job is the fault runs' (tests/local/
  fault_job.py: cnn-digits, W = 4, two segments).
* The deadline's path is the same Catch with the other error, so it runs on the stub handlers
  (seconds, not a training run): ``DeadlineExceeded`` from ``next`` ends the execution in
  ``Deadline exceeded`` with error DEADLINE_EXCEEDED after finalize recorded it; the
  trigger's own deadline arithmetic is tests/runtime/test_guards.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasdl.contract.limits import BUDGET_EXCEEDED, DEADLINE_EXCEEDED
from infra import guard_states
from local.aws.template import LocalTemplate
from tests.local.fault_job import SEGMENT, fault_job_plan
from tests.local.runs import Synthesized, local_run, synthesizer
from tests.local.stub_workflow import run_stub_workflow, stub_calls, stub_emulator

RUN_TIMEOUT_S = 240  # beside the other xdist worker's load


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The faults job's plan (two segments of 44 iterations) and dataset."""
    return fault_job_plan(tmp_path_factory.mktemp("job"))


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesizer(tmp_path_factory.mktemp)


@pytest.mark.slow
def test_budget_stops_the_run_before_its_second_segment(
        plan: Path, synthesized: Synthesized, tmp_path: Path) -> None:
    job = synthesized(plan, "s3")
    result = local_run(job.plan, job.cdk_out, tmp_path / "budget", "budget",
                       "--budget-usd", "0.0001", timeout_s=RUN_TIMEOUT_S)
    report = result.report
    assert result.code == 1, result.output[-3000:]
    assert report["status"] == BUDGET_EXCEEDED and report["execution_error"] == BUDGET_EXCEEDED
    assert [s["index"] for s in report["segments"]] == [0]  # the second one never started
    assert {i["worker"] for i in report["invocations"] if i["worker"] is not None} == {
        0, 1, 2, 3}
    assert len([i for i in report["invocations"] if i["worker"] is not None]) == 4
    stop = report["stop"]
    assert stop["checkpoint_kept"], stop  # the local S3 still holds its manifest
    assert f"checkpoint/it/{SEGMENT:08d}/" in stop["checkpoint_key"]
    assert "limits.budget_usd $0.0001" in stop["reason"]
    resume = stop["resume"]
    assert resume["input"]["resume"]["segment"]["start_iteration"] == SEGMENT
    assert resume["input"]["limits"]["budget_usd"] > 0.0001
    assert "aws stepfunctions start-execution" in resume["command"]
    assert "to resume on AWS" in result.output and resume["command"] in result.output
    failure = report["failure"]
    measured = failure["measured"]  # the first segment's 4 workers and 2 trigger calls
    assert measured["lambda_requests"] == 4 + 2 and measured["billed_gb_s"]["worker"] > 0
    assert measured["measured_lambda_usd"] > 0.0001
    assert report["summary"] is None and result.model is None


def test_deadline_stop_ends_in_its_own_failed_state(default_template: LocalTemplate,
                                                    scratch: Path) -> None:
    with stub_emulator(default_template, scratch, STUB_SEGMENTS="3",
                   STUB_STOP_AT="0:DeadlineExceeded") as emulator:
        (execution,) = run_stub_workflow(emulator, default_template.definition, {"run_id": "late"})
    assert execution["status"] == "FAILED"
    assert execution["error"] == DEADLINE_EXCEEDED
    # the Fail state's cause is the trigger's error as Lambda reports it (its message inside)
    assert json.loads(execution["cause"])["errorMessage"] == "stopped after segment 0"
    calls = stub_calls(scratch)
    assert [c["kind"] for c in calls if not c["kind"].startswith("worker")] == [
        "trigger.start", "trigger.next", "finalize.failed"]
    assert len([c for c in calls if c["kind"] == "worker.train"]) == 4  # one segment only
    recorded = calls[-1]["event"]["state"]
    assert recorded["error"]["Error"] == "DeadlineExceeded"
    assert recorded["run"]["segment"]["index"] == 0  # the finished segment's state
    states = default_template.definition["States"]
    assert states[guard_states.STOP_STATE_NAMES[BUDGET_EXCEEDED]]["Error"] == BUDGET_EXCEEDED
    assert json.dumps(states).count(guard_states.RECORD_STOP) >= 2
