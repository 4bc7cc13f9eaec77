"""The plan's ``run`` section: which run a frozen plan is and which execution claimed it.

The trigger writes it into the copy of the plan it stores at the run's start
(fasdl.run.run_state.start_run); the run claim (fasdl.run.run_claim) compares ``execution``
and ``started`` with the starting execution's to tell its own retried start from another
execution's. The name alone is not enough: Step Functions lets a name be used again 90 days
after its execution (StartExecution: "Names can be reused after 90 days"), and the later
execution must not take over the earlier one's run; its start time (the context object's
``$$.Execution.StartTime``, the same for every retry and redrive) tells them apart. A plan the
planner writes has no ``run`` section. Pure Python (Lambda, planner, CDK).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fasdl.contract.fields import require_pattern

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")
# A Step Functions execution name is 1-80 characters; empty: started without one (a test or a
# local call), which the claim treats as nobody's
EXECUTION = re.compile(r"^[\x21-\x7e]{0,80}\Z")
# ISO 8601 as Step Functions writes it ("2026-11-29T07:01:02.345Z"); empty: not given (a plan
# frozen before the field, a test or a local call)
STARTED = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:?\d\d)?)?\Z")


@dataclass(frozen=True)
class RunOwner:
    """The run id and the execution (name, start time) that created the run's plan."""

    run_id: str
    execution: str
    started: str = ""

    def is_execution(self, execution: str, started: str) -> bool:
        """Whether a start by ``execution`` started at ``started`` is this run's own (a
        retry); an empty name is nobody's."""
        return bool(execution) and (self.execution, self.started) == (execution, started)

    def describe(self) -> str:
        return f"{self.execution!r}" + (f" (started {self.started})" if self.started else "")

    def validate(self) -> None:
        require_pattern("run.run_id", self.run_id, RUN_ID,
                        "1-128 letters, digits, '_', '.', '-' starting with a letter or digit")
        require_pattern("run.execution", self.execution, EXECUTION,
                        "an execution name of 0-80 printable characters without spaces")
        require_pattern("run.started", self.started, STARTED,
                        "empty or the execution's ISO 8601 start time")
