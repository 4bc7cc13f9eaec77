"""``python -m local run --start-twice``: a second execution with the running one's run id
(bench.chaos's ``same_run_id``), as a user who starts the same input twice, or a script that
retries StartExecution under a new execution name, would.

The second execution starts once the first one's trigger has issued epoch 1
(``runs/<run>/fence.json`` exists), so the run is the first's; the trigger must refuse the
second with ``RunExists`` before any worker of it starts, and its failure path must leave the
first's run alone (fasdl.run.run_claim). The report's ``second_start`` says how it ended; the
first execution's report and weights are the run's as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from local.aws.adapter import LocalStepFunctions
from local.faults.chaos_faults import live_epoch

SUFFIX = "-second-start"
Say = Callable[[str], None]


@dataclass
class SecondStart:
    """Starts the second execution at the first poll that finds the run's fence."""

    sfn: LocalStepFunctions
    machine: str
    run_id: str
    run_input: dict[str, Any]
    s3_client: Any
    say: Say
    arn: str | None = None

    @property
    def name(self) -> str:
        return f"{self.run_id}{SUFFIX}"

    def poll(self) -> None:
        if self.arn is not None or live_epoch(self.s3_client, self.run_id) is None:
            return
        self.arn = self.sfn.start(self.machine, self.name, self.run_input)
        self.say(f"started a second execution {self.name} with run id {self.run_id!r}")

    def outcome(self) -> dict[str, Any]:
        """How the second execution ended: ``{"execution", "status", "error", "cause"}``
        (status ``NOT_STARTED`` when the first ended before its fence appeared)."""
        if self.arn is None:
            return {"execution": self.name, "status": "NOT_STARTED", "error": None,
                    "cause": None}
        found = self.sfn.client.describe_execution(executionArn=self.arn)
        return {"execution": self.name, "status": found["status"],
                "error": found.get("error"), "cause": found.get("cause")}

    def is_second(self, execution: dict[str, Any]) -> bool:
        return self.arn is not None and execution.get("executionArn") == self.arn


def with_second_start(on_poll: Callable[[], None],
                      second: SecondStart | None) -> Callable[[], None]:
    """``on_poll``, and the second start's poll when one is asked for."""
    if second is None:
        return on_poll

    def poll() -> None:
        on_poll()
        second.poll()

    return poll
