"""The opt-in profiling state machine: one profiler per memory, its ASL shape and a run in
moto's ASL interpreter with fake profilers (defaults merged with the input, routing by memory,
the collector's output)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.awslambda_simple.models import LambdaSimpleBackend

from infra import profiling_workflow as profiling
from infra.settings import SynthSettingsError
from infra.workflow import NOT_READY_RETRIER, RETRIERS
from tests.infra.conftest import Synth, state_machine_definition
from tests.infra.moto_workflow import MOTO_CONFIG, REGION

PROFILER = "handlers.profiler.handler"


def _profilers(synth: Synth) -> dict[int, str]:
    """Memory -> logical id of every profiler function."""
    return {f["Properties"]["MemorySize"]: logical
            for logical, f in synth.resources("AWS::Lambda::Function").items()
            if f["Properties"]["Handler"] == PROFILER}


def test_profiling_is_opt_in(wide_synth: Synth) -> None:
    assert wide_synth.stack.profiling is None
    assert len(wide_synth.resources("AWS::StepFunctions::StateMachine")) == 1
    assert "ProfilingStateMachineArn" not in wide_synth.json["Outputs"]
    assert list(_profilers(wide_synth)) == [wide_synth.settings.plan.deployment.memory_mb]


@pytest.mark.parametrize("context,plan_memory,expected", [
    ({}, 2048, ()),
    ({"profiling": "true"}, 2048, profiling.DEFAULT_MEMORIES),
    ({"profiling": "true"}, 1769, tuple(sorted({1769, *profiling.DEFAULT_MEMORIES}))),
    ({"profile_memories": "3008, 1024"}, 2048, (1024, 2048, 3008)),
])
def test_memories_from_context(context: dict[str, object], plan_memory: int,
                               expected: tuple[int, ...]) -> None:
    assert profiling.profiling_memories(context, plan_memory) == expected


@pytest.mark.parametrize("value", ["64", "20000", "1024,big"])
def test_bad_memories_are_refused(value: str) -> None:
    with pytest.raises(SynthSettingsError, match="profile_memories"):
        profiling.profiling_memories({"profile_memories": value}, 2048)


def test_one_profiler_per_memory(s3_synth: Synth, valkey_synth: Synth) -> None:
    assert sorted(_profilers(s3_synth)) == list(profiling.DEFAULT_MEMORIES)
    assert sorted(_profilers(valkey_synth)) == [1024, 3008]
    for synth in (s3_synth, valkey_synth):
        for logical in _profilers(synth).values():
            props = synth.json["Resources"][logical]["Properties"]
            assert props["Timeout"] == 900
            assert props["Architectures"] == [synth.settings.plan.deployment.arch]
            assert ("VpcConfig" in props) == (synth.settings.plan.deployment.channel == "valkey")
            assert props["Environment"]["Variables"]["FASDL_PROFILES_PREFIX"] == "profiles/"


def test_profiler_roles_write_profiles_only(s3_synth: Synth) -> None:
    for logical in _profilers(s3_synth).values():
        role = s3_synth.json["Resources"][logical]["Properties"]["Role"]["Fn::GetAtt"][0]
        policies = [p for p in s3_synth.resources("AWS::IAM::Policy").values()
                    if any(r["Ref"] == role for r in p["Properties"]["Roles"])]
        text = json.dumps(policies)
        assert "/profiles/*" in text and "/runs/*" not in text


def test_state_machine_shape(valkey_synth: Synth) -> None:
    definition = state_machine_definition(valkey_synth, "Profiling")
    states = definition["States"]
    assert definition["StartAt"] == profiling.SET_DEFAULTS
    assert states[profiling.SET_DEFAULTS]["Parameters"]["memories"] == [1024, 3008]
    assert states[profiling.SET_DEFAULTS]["Parameters"]["profile_id.$"] == "$$.Execution.Name"
    assert states[profiling.MERGE_INPUT]["Next"] == profiling.FIND_CACHE
    # the profilers of a Valkey stack get the cache's endpoint as the workers do: the trigger
    # looks it up (FasdlCacheStack may have been replaced), retried while it is being created
    find = states[profiling.FIND_CACHE]
    assert find["Parameters"] == {"action": "cache"} and find["ResultPath"] == "$.found"
    assert find["Retry"][0]["ErrorEquals"] == list(NOT_READY_RETRIER.errors)
    assert find["Next"] == profiling.PROFILE_EACH
    each = states[profiling.PROFILE_EACH]
    assert each["ItemSelector"]["cache.$"] == "$.found.cache"
    assert each["ItemsPath"] == "$.config.memories" and each["ResultPath"] == "$.profiled"
    assert each["Next"] == profiling.COLLECT
    inner = each["ItemProcessor"]["States"]
    route = inner[profiling.ROUTE]
    assert {(c["NumericEquals"], c["Next"]) for c in route["Choices"]} == {
        (1024, "Profile at 1024 MB"), (3008, "Profile at 3008 MB")}
    assert route["Default"] == profiling.NOT_DEPLOYED
    tasks = [inner["Profile at 1024 MB"], inner["Profile at 3008 MB"],
             states[profiling.COLLECT]]
    for task in tasks:
        assert [rule["ErrorEquals"] for rule in task["Retry"]] == [
            list(retrier.errors) for retrier in RETRIERS]
        assert task["Parameters"].get("cache.$", "$.cache") == "$.cache"
    assert states[profiling.COLLECT]["Parameters"]["action"] == "collect"
    assert states[profiling.READY] == {"Type": "Succeed", "OutputPath": "$.collected"}


def test_outputs(s3_synth: Synth) -> None:
    outputs = s3_synth.json["Outputs"]
    assert "ProfilingStateMachineArn" in outputs
    s3_synth.template.has_resource_properties("AWS::StepFunctions::StateMachine", {
        "StateMachineName": "FasdlStack-profiling", "TracingConfiguration": {"Enabled": True}})
    command = outputs["StartProfilingCommand"]["Value"]["Fn::Join"][1]
    assert command[0] == "aws stepfunctions start-execution --state-machine-arn "
    assert "profiles/my-profile/samples.jsonl" in json.dumps(outputs["FetchSamplesCommand"])


def test_statelint(s3_synth: Synth, valkey_synth: Synth, tmp_path: Path) -> None:
    paths = []
    for synth in (s3_synth, valkey_synth):
        path = tmp_path / f"{synth.name}.asl.json"
        path.write_text(json.dumps(state_machine_definition(synth, "Profiling")))
        paths.append(str(path))
    statelint = Path(sys.executable).parent / "statelint"
    result = subprocess.run([str(statelint), "--ignore=FLOAT", *paths], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def _run(definition: dict[str, Any], run_input: dict[str, Any],
         calls: list[dict[str, Any]]) -> dict[str, Any]:
    with mock_aws(config=MOTO_CONFIG):
        sfn = boto3.client("stepfunctions", region_name=REGION)
        role = boto3.client("iam", region_name=REGION).create_role(
            RoleName="sfn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        arn = sfn.create_state_machine(name="profiling", definition=json.dumps(definition),
                                       roleArn=role)["stateMachineArn"]
        execution = sfn.start_execution(stateMachineArn=arn, name="prof-1",
                                        input=json.dumps(run_input))["executionArn"]
        # a hang bound only: an execution takes seconds; load slows moto's threads, no more
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            described: dict[str, Any] = sfn.describe_execution(executionArn=execution)
            if described["status"] != "RUNNING":
                return described
            time.sleep(0.05)
    raise AssertionError("execution did not finish")


CACHE = {"address": "fasdlstack-exchange-x.serverless.use1.cache.amazonaws.com", "port": 6379}


def test_profiling_runs_in_moto(valkey_synth: Synth, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def invoke(self: object, function_name: str, qualifier: object, body: str,
               headers: object, response_headers: dict[str, str]) -> bytes:
        event = json.loads(body)
        calls.append(event)
        if event["action"] == "collect":
            result = {"samples_key": f"profiles/{event['profile_id']}/samples.jsonl",
                      "memories": event["memories"]}
        elif event["action"] == "cache":  # the trigger: the Valkey cache's endpoint
            result = {"cache": CACHE}
        else:
            result = {"memory_mb": event["memory_mb"], "model": event["config"]["model"]}
        return json.dumps(result).encode()

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", invoke)
    definition = state_machine_definition(valkey_synth, "Profiling")
    done = _run(definition, {"model": "mlp", "batches": [8, 16]}, calls)
    assert done["status"] == "SUCCEEDED", done
    assert json.loads(done["output"]) == {"samples_key": "profiles/prof-1/samples.jsonl",
                                          "memories": [1024, 3008]}
    profiled = sorted((c for c in calls if c["action"] == "profile"),
                      key=lambda c: c["memory_mb"])
    assert [c["memory_mb"] for c in profiled] == [1024, 3008]
    # each profiler gets the endpoint the trigger found, as the workers of a run do
    assert calls[0]["action"] == "cache"
    assert all(c["cache"] == CACHE for c in profiled)
    config = profiled[0]["config"]
    assert config["model"] == "mlp" and config["batches"] == [8, 16]  # the input wins
    assert config["sizes_mb"] == profiling.DEFAULT_INPUT["sizes_mb"]  # defaults fill the rest
    assert config["profile_id"] == "prof-1"

    calls.clear()
    failed = _run(definition, {"memories": [512]}, calls)
    assert failed["status"] == "FAILED" and failed.get("error") == \
        profiling.MEMORY_NOT_DEPLOYED_ERROR
