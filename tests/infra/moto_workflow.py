"""moto's configuration for running a state machine, and fake Lambdas that follow
fasdl/contract/events.py and record every call (test_workflow_moto.py, test_vpc_errors_moto.py,
test_profiling_workflow.py)."""

from __future__ import annotations

from typing import Any

from fasdl.contract.events import OUTCOME_ACTION, RunState
from fasdl.run import segment_outcome

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
