"""An adaptive plan's re-plan function and state (infra/replan.py, infra/workflow.py): only an
adaptive plan gets them (tests/infra/plans/valkey_arm64.json is one, W = 8 up to 16); the
function routes "Plan next segment" to the next Map, runs outside the VPC, ships the plan's
profiles, and may create only its decisions and changed plans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fasdl.contract.training import (
    BUNDLED_PROFILES,
    CACHE_ECPU_MAX_ENV,
    MEASURED_ON_ENV,
    profiles_path,
)
from infra import workflow
from infra.cache_limits import cache_limits
from infra.replan import HANDLER, MEMORY_MB
from tests.infra.conftest import Synth, function_props, state_machine_definition


def policy_statements(synth: Synth, role_logical_id: str) -> list[dict[str, Any]]:
    found = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        roles = policy["Properties"]["Roles"]
        if {"Ref": role_logical_id} in roles:
            found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def test_only_an_adaptive_plan_gets_the_re_plan_state(synths: dict[str, Synth]) -> None:
    for synth in synths.values():
        adaptive = synth.settings.plan.training.adaptive != "off"
        states = state_machine_definition(synth)["States"]
        handlers = {f["Properties"].get("Handler")
                    for f in synth.resources("AWS::Lambda::Function").values()}
        assert (workflow.REPLAN in states) == adaptive == (HANDLER in handlers), synth.name
        assert (workflow.REPLAN_START in states) == adaptive
        if not adaptive:
            assert states[workflow.PLAN_NEXT]["Next"] == workflow.COUNT
            assert states[workflow.PLAN_RUN]["Next"] == workflow.MORE_SEGMENTS


def test_the_re_plan_follows_every_state_that_issues_a_segment(valkey_synth: Synth) -> None:
    """After "Plan next segment" (then Count segment) and after "Plan run" (a resumed or
    continued run's segment; a fresh run's first passes through)."""
    states = state_machine_definition(valkey_synth)["States"]
    for issuer, name, then in ((workflow.PLAN_NEXT, workflow.REPLAN, workflow.COUNT),
                               (workflow.PLAN_RUN, workflow.REPLAN_START,
                                workflow.MORE_SEGMENTS)):
        assert states[issuer]["Next"] == name
        replan = states[name]
        assert replan["Next"] == then and replan["ResultPath"] == "$.run"
        assert replan["Parameters"] == {"run.$": "$.run"}
        assert replan["Catch"][-1]["Next"] == workflow.RECORD_FAILURE
        assert [rule["ErrorEquals"] for rule in replan["Retry"]] == [
            list(retrier.errors) for retrier in workflow.RETRIERS]


def test_the_function_ships_the_profiles_outside_the_vpc(valkey_synth: Synth) -> None:
    plan = valkey_synth.settings.plan
    props = function_props(valkey_synth, HANDLER)
    assert props["MemorySize"] == MEMORY_MB and props["Architectures"] == [plan.deployment.arch]
    assert "VpcConfig" not in props  # S3 only, like the trigger
    variables = props["Environment"]["Variables"]
    assert variables[MEASURED_ON_ENV] == f"aws-lambda-{plan.deployment.arch}"
    assert int(variables[CACHE_ECPU_MAX_ENV]) == cache_limits(plan).ecpu_per_second
    worker = function_props(valkey_synth, "handlers.worker.handler")
    assert props["Layers"] == worker["Layers"][:1]  # the torch layer's python/: numpy & co.
    asset = _asset_dir(valkey_synth)
    assert {path.name for path in asset.iterdir()} >= {"planner", "fasdl", "replan",
                                                       BUNDLED_PROFILES}
    profiles = profiles_path(valkey_synth.settings.plan_path)
    assert json.loads((asset / BUNDLED_PROFILES).read_text()) == json.loads(
        profiles.read_text())
    assert not (asset / "handlers").exists() and not (asset / "tests").exists()


def test_it_may_create_only_decisions_and_changed_plans(valkey_synth: Synth) -> None:
    role = function_props(valkey_synth, HANDLER)["Role"]["Fn::GetAtt"][0]
    statements = policy_statements(valkey_synth, role)
    writes = [s for s in statements if "s3:PutObject" in _list(s["Action"])]
    (put,) = writes
    assert _list(put["Action"]) == ["s3:PutObject"]
    keys = [json.dumps(resource) for resource in _list(put["Resource"])]
    assert len(keys) == 2
    assert any("/runs/*/adaptations/*" in key for key in keys)
    assert any("/runs/*/plans/*" in key for key in keys)
    actions = {action for s in statements for action in _list(s["Action"])}
    assert not any(action.startswith(("s3:Delete", "lambda:", "states:", "ec2:"))
                   for action in actions), actions


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _asset_dir(synth: Synth) -> Path:
    """The staged code folder of the re-plan function (its asset's source)."""
    replan = synth.stack.replan
    assert replan is not None
    return Path(replan.code_dir)
