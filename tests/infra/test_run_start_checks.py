"""The infrastructure of the trigger's run-start checks (fasdl/aws/account.py): the trigger's Lambda
permissions, the worker's name in its environment, and ``-c reserve_concurrency=true``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fasdl.contract.plan import PlanError
from fasdl.contract.settings import WORKER_FUNCTION_ENV
from infra.compute import TRIGGER_TIMEOUT
from infra.settings import DEFAULT_PLAN_PATH, SynthSettingsError
from tests.infra.conftest import Synth, synthesize


def _function_id(synth: Synth, handler: str) -> str:
    (found,) = [logical for logical, resource in synth.resources("AWS::Lambda::Function").items()
                if resource["Properties"].get("Handler") == handler
                or resource["Properties"].get("ImageConfig", {}).get("Command") == [handler]]
    return found


def _lambda_statements(synth: Synth) -> dict[str, list[dict[str, Any]]]:
    """Every statement granting a lambda: action other than Step Functions' invokes, by the
    logical id of the role whose policy holds it."""
    found: dict[str, list[dict[str, Any]]] = {}
    for policy in synth.resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            actions = actions if isinstance(actions, list) else [actions]
            if any(action.startswith("lambda:") for action in actions):
                for role in policy["Properties"]["Roles"]:
                    found.setdefault(role["Ref"], []).append(statement)
    return found


def _role_of(synth: Synth, function: str) -> str:
    role: str = synth.json["Resources"][function]["Properties"]["Role"]["Fn::GetAtt"][0]
    return role


def test_trigger_reads_the_account_and_only_the_worker_function(synth: Synth) -> None:
    worker = _function_id(synth, "handlers.worker.handler")
    trigger = _function_id(synth, "handlers.trigger.handler")
    statements = _lambda_statements(synth)[_role_of(synth, trigger)]
    granted = {(action, json.dumps(statement["Resource"]))
               for statement in statements
               for action in (statement["Action"] if isinstance(statement["Action"], list)
                              else [statement["Action"]])}
    worker_arn = json.dumps({"Fn::GetAtt": [worker, "Arn"]})
    assert granted == {("lambda:GetAccountSettings", '"*"'),
                       ("lambda:GetFunctionConfiguration", worker_arn),
                       ("lambda:GetFunctionConcurrency", worker_arn),
                       ("lambda:InvokeFunction", worker_arn)}
    # no other function's role may read or invoke Lambda functions
    state_machine_roles = {machine["Properties"]["RoleArn"]["Fn::GetAtt"][0] for machine
                           in synth.resources("AWS::StepFunctions::StateMachine").values()}
    assert set(_lambda_statements(synth)) - state_machine_roles == {_role_of(synth, trigger)}


def test_trigger_knows_the_worker_function_by_name(synth: Synth) -> None:
    worker = _function_id(synth, "handlers.worker.handler")
    trigger = synth.json["Resources"][_function_id(synth, "handlers.trigger.handler")]
    variables = trigger["Properties"]["Environment"]["Variables"]
    assert variables[WORKER_FUNCTION_ENV] == {"Ref": worker}
    # the wait for an Active worker (<= 90 s) and 20 s of work fit the trigger's timeout
    assert trigger["Properties"]["Timeout"] == TRIGGER_TIMEOUT.to_seconds() >= 110


def test_no_reserved_concurrency_by_default(synth: Synth) -> None:
    for resource in synth.resources("AWS::Lambda::Function").values():
        assert "ReservedConcurrentExecutions" not in resource["Properties"]


def test_reserve_concurrency_reserves_2w_for_the_worker_only() -> None:
    synth = synthesize("reserved", DEFAULT_PLAN_PATH, reserve_concurrency="true")
    workers = synth.settings.plan.deployment.workers
    reserved = {logical: resource["Properties"].get("ReservedConcurrentExecutions")
                for logical, resource in synth.resources("AWS::Lambda::Function").items()}
    worker = _function_id(synth, "handlers.worker.handler")
    assert reserved.pop(worker) == 2 * workers
    assert set(reserved.values()) == {None}


def _plan(tmp_path: Path, workers: int, max_concurrency: object) -> Path:
    """The default plan with W workers (equal batches of 8) and the planner's quota."""
    data = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["deployment"]["workers"] = workers
    data["workload"].update(samples=60_000, dataset="datasets/mnist")
    data["training"].update(aggregators=min(4, workers), batch_aggregator=8,
                            batch_non_aggregator=8, max_global_batch=8 * workers)
    if max_concurrency is not None:
        data["quotas"] = {"max_concurrency": max_concurrency, "max_memory_mb": 10240}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("workers", "quota"), [(4, 107), (451, None)])
def test_a_reservation_leaving_under_100_unreserved_is_refused(
        tmp_path: Path, workers: int, quota: int | None) -> None:
    with pytest.raises(SynthSettingsError) as raised:
        synthesize("too-many", _plan(tmp_path, workers, quota), reserve_concurrency="true")
    message = str(raised.value)
    limit = int(quota or 1000)
    assert message.startswith("context 'reserve_concurrency=true' reserves "
                              f"2·W = 2·{workers} = {2 * workers} concurrent executions"), message
    assert f"the plan's concurrency quota is {limit}" in message
    assert f"{limit} - {2 * workers} = {limit - 2 * workers} < 100" in message
    assert "L-B99A9384" in message and f"at least {2 * workers + 100}" in message


def test_a_reservation_leaving_exactly_100_is_allowed(tmp_path: Path) -> None:
    synth = synthesize("exact", _plan(tmp_path, 4, 108), reserve_concurrency="true")
    worker = _function_id(synth, "handlers.worker.handler")
    assert synth.json["Resources"][worker]["Properties"]["ReservedConcurrentExecutions"] == 8


def test_a_malformed_quota_in_the_plan_is_named(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"quotas\.max_concurrency.*integer \[2, 1000000\]"):
        synthesize("malformed", _plan(tmp_path, 4, "lots"), reserve_concurrency="true")
