"""Deadline and budget guards through the synthesized state machine (fasdl.run.guards,
infra/guard_states.py).

* The budget's path end to end (``python -m local run --budget-usd 0.0001``, then
  ``--resume``) is in tests/local/run/test_run_faults.py, beside the undisturbed run whose
  weights the resumed run must end with.
* The deadline's path is the same Catch with the other error, so it runs on the stub handlers
  (seconds, not a training run): ``DeadlineExceeded`` from ``next`` ends the execution in
  ``Deadline exceeded`` with error DEADLINE_EXCEEDED after finalize recorded it; the
  trigger's own deadline arithmetic is tests/runtime/test_guards.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from fasdl.contract.limits import BUDGET_EXCEEDED, DEADLINE_EXCEEDED
from infra import guard_states
from local.aws.template import LocalTemplate
from tests.local.stub_workflow import run_stub_workflow, stub_calls, stub_emulator


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
