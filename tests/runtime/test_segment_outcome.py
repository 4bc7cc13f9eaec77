"""The trigger's ``outcome`` action: which statuses a Distributed Map's children reported.

The state machine's Choice reads ``occurred.<status>`` for every kind and the Causes read
``workers.<status>``: a missing key there would be a States.Runtime error that no Catch stops.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from fasdl.run.run_state import RunStateError
from fasdl.run.segment_outcome import summarize
from tests.lambda_context import FakeLambdaContext

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
if str(FUNCTIONS) not in sys.path:  # handlers/ is the Lambda asset root, not a package
    sys.path.insert(0, str(FUNCTIONS))

from handlers import trigger  # noqa: E402

STATUSES = ["out_of_memory", "failed", "timed_out", "crashed"]


def child(worker: int, status: str, error: str = "") -> dict[str, object]:
    return {"worker": worker, "status": status, "error": error}


def test_every_kind_gets_its_flag_and_sorted_workers() -> None:
    results = [child(3, "crashed", "Runtime.ExitError"), child(0, "ok"),
               child(2, "timed_out", "Sandbox.Timedout"), child(1, "crashed", "ChannelTimeout")]
    outcome = summarize({"results": results, "statuses": STATUSES})
    assert outcome == {
        "occurred": {"out_of_memory": False, "failed": False, "timed_out": True,
                     "crashed": True},
        "workers": {"out_of_memory": [], "failed": [], "timed_out": [2], "crashed": [1, 3]}}


def test_all_finished_sets_no_flag() -> None:
    outcome = summarize({"results": [child(w, "ok") for w in range(4)], "statuses": STATUSES})
    assert not any(outcome["occurred"].values())
    assert set(outcome["occurred"]) == set(outcome["workers"]) == set(STATUSES)


@pytest.mark.parametrize(("event", "field"), [
    ({"results": [child(0, "exploded")], "statuses": STATUSES}, "results[0].status"),
    ({"results": [{"worker": -1, "status": "ok"}], "statuses": STATUSES}, "results[0]"),
    ({"results": ["ok"], "statuses": STATUSES}, "results[0]"),
    ({"results": {"0": "ok"}, "statuses": STATUSES}, "results"),
    ({"results": [], "statuses": []}, "statuses"),
    ({"results": [], "statuses": ["ok", 3]}, "statuses"),
])
def test_a_malformed_event_names_the_field(event: dict[str, object], field: str) -> None:
    with pytest.raises(RunStateError, match=f"'{field.replace('[', '.').replace(']', '.')}'"):
        summarize(event)


def test_a_thousand_workers_stay_far_below_the_payload_limit(s3: Any) -> None:
    results = [child(w, "out_of_memory" if w % 2 else "ok", "Runtime.OutOfMemory")
               for w in range(1000)]
    event = {"action": "outcome", "results": results, "statuses": STATUSES}
    assert len(json.dumps(event)) < 256 * 1024 // 2  # the task's input
    outcome = trigger.handler(event, FakeLambdaContext())  # the deployed trigger's door
    assert len(json.dumps(outcome)) < 16 * 1024  # what stays in the state
    assert outcome["workers"]["out_of_memory"] == list(range(1, 1000, 2))  # type: ignore[index]
