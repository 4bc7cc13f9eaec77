"""A console ``resume`` (issue 15): only the state of an existing run, consistent with its
plan, its checkpoints and its fence, is continued; anything else is refused naming the field."""

from __future__ import annotations

import re

import pytest

from fasdl.contract.errors import FenceConflict
from fasdl.run.run_state import RunStateError
from tests.lambda_context import FakeLambdaContext
from tests.runtime.handler_helpers import s3_env, s3_objects, start, trigger  # noqa: F401


# conftest's buckets with handler_helpers' s3_env and s3_objects (its deployment and dataset)
@pytest.mark.usefixtures("s3")
def test_a_console_resume_must_match_an_existing_run() -> None:
    run = start({"run_id": "real"})
    later = trigger.handler({"action": "next", "run": run},
                            FakeLambdaContext())  # no checkpoint was written
    forged = [
        ({**run, "run_id": "../x"}, "run_id"),
        ({**run, "plan_key": "runs/other/plan.json"}, "resume.plan_key"),
        ({**run, "plan_key": "runs/real/plans/../plan.json"}, "resume.plan_key"),
        ({**run, "plan_key": "runs/other/plans/00003.json"}, "resume.plan_key"),
        # a plan an adaptive run changed to is its own: accepted, then read (absent here)
        ({**run, "plan_key": "runs/real/plans/00003.json"}, "cannot read"),
        ({**run, "run_id": "ghost", "plan_key": "runs/ghost/plan.json"}, "cannot read"),
        ({**run, "segment": {**run["segment"], "iterations": 10**9}}, "run past the plan"),
        ({**run, "workers": list(range(1000))}, "resume.workers"),
        (later, "no checkpoint of epoch 1 at iteration 10"),
    ]
    for state, message in forged:
        with pytest.raises(RunStateError, match=re.escape(message)):
            start({"resume": state})
    # a state older than the fence is stale (issue 41): resuming it would fence the newer one
    with pytest.raises(FenceConflict, match="run state is at epoch 1 but the fence is at 2"):
        start({"resume": run})
    current = {**run, "segment": {**run["segment"], "epoch": later["segment"]["epoch"]}}
    assert start({"resume": current})["segment"]["epoch"] == later["segment"]["epoch"] + 1
