"""The plan's ``run`` section: which run a frozen plan is and which execution claimed it.

The trigger writes it into the copy of the plan it stores at the run's start
(fasdl.run.run_state.start_run); the run claim (fasdl.run.run_claim) compares ``execution``
with the starting execution's to tell its own retried start from another execution's. A plan
the planner writes has no ``run`` section. Pure Python (Lambda, planner, CDK).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fasdl.contract.fields import require_pattern

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")
# A Step Functions execution name is 1-80 characters; empty: started without one (a test or a
# local call), which the claim treats as nobody's
EXECUTION = re.compile(r"^[\x21-\x7e]{0,80}\Z")


@dataclass(frozen=True)
class RunOwner:
    """The run id and the name of the execution that created the run's plan."""

    run_id: str
    execution: str

    def validate(self) -> None:
        require_pattern("run.run_id", self.run_id, RUN_ID,
                        "1-128 letters, digits, '_', '.', '-' starting with a letter or digit")
        require_pattern("run.execution", self.execution, EXECUTION,
                        "an execution name of 0-80 printable characters without spaces")
