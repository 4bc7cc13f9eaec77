"""moto's configuration for running a state machine, one execution run to its end, and fake
Lambdas that follow fasdl/contract/events.py and record every call (test_workflow_moto.py,
test_vpc_errors_moto.py, test_profiling_workflow.py, test_run_exists_moto.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
from moto import mock_aws

from fasdl.contract.events import OUTCOME_ACTION, RunState
from fasdl.run import segment_outcome
from infra import workflow

REGION = "us-east-1"
SEGMENTS = 3  # the fake trigger's run
MOTO_CONFIG: Any = {"stepfunctions": {"execute_state_machine": True},
                    "lambda": {"use_docker": False}}


class WorkerTimeout(Exception):
    """Raised by a fake worker: the invoke answers as Lambda's timeout."""


class WorkerExit(Exception):
    """Raised by a fake worker: the invoke answers as a process that died."""


class FakeLambdas:
    """Trigger, worker and finalize per the contract; records every call."""

    def __init__(self, workers: int, *, timeout_at: tuple[int, int] | None = None,
                 crash_at: tuple[int, int] | None = None,
                 exit_at: tuple[int, int] | None = None) -> None:
        self.workers = workers
        self.timeout_at = timeout_at  # (segment index, worker): time out once
        self.crash_at = crash_at  # (segment index, worker): raise a plain error
        self.exit_at = exit_at  # (segment index, worker): the process dies, attempt 0 only
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, function_name: str, event: dict[str, Any]) -> dict[str, Any]:
        name = function_name.split(":")[-1]
        role = next(r for r in ("Trigger", "Worker", "Finalize") if r in name)
        self.calls.append((f"{role}.{event.get('action')}", event))
        result: dict[str, Any] = getattr(self, role.lower())(event)
        return result

    def trigger(self, event: dict[str, Any]) -> dict[str, Any]:
        if event["action"] == OUTCOME_ACTION:  # the real summary: pure logic
            return dict(segment_outcome.summarize(event))
        if event["action"] == "start":
            resume = event["input"].get("resume")
            if resume is not None:
                return dict(resume)
            return dict(RunState(run_id=event["input"].get("run_id", "run-1"),
                            plan_key="runs/run-1/plan.json",
                            segment={"index": 0, "start_iteration": 0, "iterations": 8,
                                     "attempt": 0},
                            workers=list(range(self.workers)), done=False, cache=None))
        run: dict[str, Any] = event["run"]
        segment: dict[str, int] = dict(run["segment"])
        if event["action"] == "retry":
            assert event["error"]["Error"]
            segment.update(attempt=segment["attempt"] + 1)
            return {**run, "segment": segment}
        if event["action"] == "shorten":
            assert event["error"]["Error"]
            segment.update(iterations=segment["iterations"] // 2,
                           attempt=segment["attempt"] + 1)
            return {**run, "segment": segment}
        segment.update(index=segment["index"] + 1,
                       start_iteration=segment["start_iteration"] + segment["iterations"],
                       attempt=0)
        return {**run, "segment": segment, "done": segment["index"] >= SEGMENTS}

    def worker(self, event: dict[str, Any]) -> dict[str, Any]:
        assert set(event) == {"action", "run_id", "plan_key", "segment", "worker", "cache"}
        where = (event["segment"]["index"], event["worker"])
        if where == self.timeout_at and event["segment"]["attempt"] == 0:
            raise WorkerTimeout
        if where == self.crash_at:
            raise RuntimeError("worker crashed")
        if where == self.exit_at and event["segment"]["attempt"] == 0:
            raise WorkerExit
        return {"worker": event["worker"]}

    def finalize(self, event: dict[str, Any]) -> dict[str, Any]:
        if event["action"] == "failed":
            assert event["state"]["error"]["Error"]
            return {}
        return {"run_id": event["run"]["run_id"], "model_key": "runs/run-1/model.npz",
                "summary_key": "runs/run-1/summary.json"}

    def actions(self) -> list[str]:
        """The run's actions: the Distributed Map's summaries are counted apart."""
        return [action for action, _ in self.calls
                if not action.startswith("Worker") and action != f"Trigger.{OUTCOME_ACTION}"]

    def summaries(self) -> int:
        return sum(action == f"Trigger.{OUTCOME_ACTION}" for action, _ in self.calls)


def execute_machine(definition: dict[str, Any], run_input: dict[str, Any]
             ) -> list[dict[str, Any]]:
    """Create the machine, start one execution, wait for every execution to finish."""
    with mock_aws(config=MOTO_CONFIG):
        sfn = boto3.client("stepfunctions", region_name=REGION)
        role = boto3.client("iam", region_name=REGION).create_role(
            RoleName="sfn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        arn = sfn.create_state_machine(
            name=workflow.state_machine_name("FasdlStack"), definition=json.dumps(definition),
            roleArn=role)["stateMachineArn"]
        # Named: moto names unnamed executions "None", so a second one would collide.
        sfn.start_execution(stateMachineArn=arn, name="first", input=json.dumps(run_input))
        # a hang bound only: an execution takes 1-7 s here; the interpreter's threads run at
        # whatever pace the machine's load leaves them
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            executions = sfn.list_executions(stateMachineArn=arn)["executions"]
            if all(e["status"] != "RUNNING" for e in executions):
                return [sfn.describe_execution(executionArn=e["executionArn"])
                        for e in sorted(executions, key=lambda e: e["startDate"])]
            time.sleep(0.05)
    raise AssertionError("executions did not finish")
