"""`python -m local run` against the account the trigger sees (local/aws/control_plane.py): the
synthesized state machine, real servers, one process per invocation, the trigger's real Lambda
API calls (fasdl/aws/account.py) answered over HTTP.

W = 4 needs 2·W = 8 concurrent executions: with 7 the run fails before any worker starts and
says which quota to raise; with exactly 8 it trains. A worker function reported Pending, or
Inactive until invoked, is waited for before the first Map, so no worker invocation is ever
refused; a Failed one ends the run cleanly with Lambda's reason.

The job (cnn-digits, W=4, 1 epoch in one segment: the checks are of the start) is planned and
synthesized once; the exact-quota run and the woken, then Pending, worker are one run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fasdl.aws.account import POLL_S, ConcurrencyQuotaTooLow, WorkerFunctionFailed
from infra import lambda_errors
from local.aws.template import load_template, synthesize
from local.run.run_options import RunOptions
from local.run.run_prep import prepare_dataset, prepare_plan
from local.run.runner import WORKER_HANDLER
from tests.local.runs import Run, local_run

EPOCHS = 1  # 22 iterations per epoch: one segment
RUN_TIMEOUT_S = 150


@dataclass(frozen=True)
class Job:
    plan: Path
    cdk_out: Path
    worker: str  # the worker function's name (logical id) in the emulator


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    work = tmp_path_factory.mktemp("job")
    plan = prepare_plan(RunOptions(epochs=EPOCHS, segment_iterations=EPOCHS * 22,
                                   adaptive="off"), work,
                        lambda text: None)
    plan, _ = prepare_dataset(plan, RunOptions(), work, lambda text: None)
    plan.save(work / "plan.json")
    template = synthesize(work / "plan.json", work / "cdk.out")
    worker = load_template(template, region=plan.deployment.region).function_named(
        WORKER_HANDLER)
    return Job(work / "plan.json", template.parent, worker)


def run(job: Job, directory: Path, run_id: str, *args: str) -> Run:
    return local_run(job.plan, job.cdk_out, directory / run_id, run_id, *args,
                     timeout_s=RUN_TIMEOUT_S)


def ready_lines(report_dir: Path) -> list[dict[str, Any]]:
    """What the trigger logged of its wait for the worker (its "worker function ready")."""
    lines = [json.loads(line) for path in (report_dir / "logs").glob("*-start-*.log")
             for line in path.read_text().splitlines() if line.startswith("{")]
    return [line["ready"] for line in lines if line.get("message") == "worker function ready"]


def worker_invocations(job: Job, result: Run) -> list[dict[str, Any]]:
    return [row for row in result.report["invocations"] if row["function"] == job.worker]


@pytest.mark.slow
def test_too_little_concurrency_stops_before_any_worker(job: Job, tmp_path: Path) -> None:
    result = run(job, tmp_path, "seven", "--account-concurrency", "7")
    assert result.code == 1, result.output[-3000:]
    report = result.report
    assert report["status"] == "FAILED" and report["execution_error"] == "FasDL.RunFailed"
    assert worker_invocations(job, result) == []  # nothing was started
    failure = report["failure"]  # runs/<id>/failure.json, written by finalize
    assert failure is not None and failure["error"] == ConcurrencyQuotaTooLow.__name__
    message = json.loads(failure["cause"])["errorMessage"]  # the Cause is Lambda's error
    for text in ("W=4", "2 x W = 8", "can use 7", "'Concurrent executions' = 7", "L-B99A9384",
                 "--desired-value 8"):
        assert text in message, (text, message)
    assert "L-B99A9384" in result.output  # the printed summary says it too


@pytest.fixture(scope="module")
def woken_at_2w(job: Job, tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    """Exactly 2·W = 8 concurrent executions and a worker function Inactive until invoked,
    then Pending for 1 poll (polls 5 s apart): one run for the three checks of the trigger's start
    (tests/runtime/test_account.py checks that a function Pending from the start is polled,
    never invoked); its report dir."""
    directory = tmp_path_factory.mktemp("woken-at-2w")
    result = run(job, directory, "woken", "--account-concurrency", "8",
                 "--worker-state", "inactive:1")
    return result, directory / "woken"


@pytest.mark.slow
def test_exactly_2w_concurrency_trains(job: Job, woken_at_2w: tuple[Run, Path]) -> None:
    result, _ = woken_at_2w
    assert result.code == 0, result.output[-3000:]
    assert result.report["status"] == "SUCCEEDED"
    assert [row["error"] for row in worker_invocations(job, result)][-4:] == [None] * 4


@pytest.mark.slow
def test_an_inactive_worker_is_woken_then_waited_for(
        job: Job, woken_at_2w: tuple[Run, Path]) -> None:
    """Inactive until invoked: the trigger's one waking invoke is refused as AWS refuses it
    (ResourceNotReadyException, nothing runs); the function is then Pending for 1 poll, which
    the trigger waits out (a worker invoked while Pending would be refused with
    ResourceConflictException, which the workflow does not retry); then the Map's workers all
    run."""
    result, report_dir = woken_at_2w
    assert result.code == 0, result.output[-3000:]
    # the waking invoke is the only refusal: no worker was invoked before Active
    assert result.report["service_errors"] == {"worker": {lambda_errors.NOT_READY: 1}}
    assert [row["error"] for row in worker_invocations(job, result)] == [
        lambda_errors.NOT_READY, None, None, None, None]
    (ready,) = ready_lines(report_dir)
    assert ready["woke"] == "ResourceNotReadyException"
    assert ready["polls"] == 3 and ready["waited_s"] >= 2 * POLL_S


@pytest.mark.slow
def test_a_failed_worker_function_fails_the_run_with_its_reason(
        job: Job, tmp_path: Path) -> None:
    result = run(job, tmp_path, "failed", "--worker-state", "failed")
    assert result.code == 1, result.output[-3000:]
    assert worker_invocations(job, result) == []
    failure = result.report["failure"]
    assert failure is not None and failure["error"] == WorkerFunctionFailed.__name__
    message = json.loads(failure["cause"])["errorMessage"]
    assert "State Failed (SubnetOutOfIPAddresses: " in message and "redeploy" in message
