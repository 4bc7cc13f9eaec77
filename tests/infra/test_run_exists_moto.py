"""A start refused with RunExists (issue 41) fails the execution with that error and never
reaches finalize: its cleanup and failure.json would be the owning run's. The synthesized
machine in moto's ASL interpreter, with a fake trigger that refuses the start."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from moto.awslambda_simple.models import LambdaSimpleBackend

from fasdl.contract.errors import RunExists
from fasdl.contract.run_owner import STARTED
from infra import workflow
from tests.infra.conftest import Synth, state_machine_definition
from tests.infra.moto_workflow import execute_machine

CAUSE = "run 'taken' already exists and belongs to execution 'owner'"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every Lambda call as ``Role.action``; the trigger's start raises RunExists."""
    made: list[str] = []

    def invoke(self: object, function_name: str, qualifier: object, body: str,
               headers: object, response_headers: dict[str, str]) -> bytes:
        event = json.loads(body)
        role = next(r for r in ("Trigger", "Worker", "Finalize") if r in function_name)
        made.append(f"{role}.{event.get('action')}")
        # the execution's identity: its name and start time (a name is reused after 90 days)
        assert event["execution"] and re.fullmatch(STARTED, event["execution_started"])
        response_headers["x-amz-function-error"] = "Unhandled"
        return json.dumps({"errorType": RunExists.__name__, "errorMessage": CAUSE}).encode()

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", invoke)
    yield made


def test_run_exists_fails_named_without_finalize(s3_synth: Synth, calls: list[str]) -> None:
    definition = state_machine_definition(s3_synth)
    (execution,) = execute_machine(definition, {"run_id": "taken"})
    assert execution["status"] == "FAILED"
    assert execution["error"] == "RunExists" and CAUSE in execution["cause"]
    assert calls == ["Trigger.start"]  # not retried, no finalize


def test_run_exists_is_caught_before_the_catch_all(s3_synth: Synth) -> None:
    plan_run = state_machine_definition(s3_synth)["States"][workflow.PLAN_RUN]
    assert plan_run["Catch"][0]["ErrorEquals"] == ["RunExists"]
    assert plan_run["Catch"][0]["Next"] == workflow.RUN_EXISTS
    assert all("RunExists" not in rule["ErrorEquals"] and "States.ALL" not in
               rule["ErrorEquals"] for rule in plan_run.get("Retry", []))
