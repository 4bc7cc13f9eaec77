"""Fine-grained assertions: the template implements the plan and the security decisions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from fasdl.contract.errors import next_memory_mb
from infra import lambda_errors, segment_states, workflow
from infra.access import WILDCARD_RESOURCE_ACTIONS
from infra.cache import cache_limits, cache_name
from infra.compute import ephemeral_storage_mb
from infra.lambda_runtime import PYTHON_RUNTIME, RUNTIME_OS
from infra.network import CACHE_PORT
from infra.segment_states import OUT_OF_MEMORY
from tests.infra.conftest import Synth, is_distributed_map, state_machine_definition


def _function(synth: Synth, handler: str) -> dict[str, Any]:
    for function in synth.resources("AWS::Lambda::Function").values():
        if function["Properties"].get("Handler") == handler:
            props: dict[str, Any] = function["Properties"]
            return props
    raise AssertionError(f"no function with handler {handler}")


def _ref_of(resources: dict[str, dict[str, Any]], value: Any) -> str:
    """Logical id behind a Ref or GetAtt."""
    if isinstance(value, dict) and "Ref" in value:
        return str(value["Ref"])
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return str(value["Fn::GetAtt"][0])
    raise AssertionError(f"not a reference: {value!r}")


# ---- compute ---------------------------------------------------------------------------
def test_every_function_and_the_layer_run_on_amazon_linux_2023(synth: Synth) -> None:
    """torch 2.13 / numpy 2.x need glibc >= 2.28: python3.11 (Amazon Linux 2, 2.26) cannot
    load them, so no function of ours may use it, and the layer must declare the same."""
    ours = {logical: f["Properties"] for logical, f
            in synth.resources("AWS::Lambda::Function").items()
            if str(f["Properties"].get("Handler", "")).startswith("handlers.")}
    assert len(ours) >= 4, sorted(ours)  # worker, trigger, finalize, profiler(s)
    assert {logical: props["Runtime"] for logical, props in ours.items()} == {
        logical: PYTHON_RUNTIME for logical in ours}
    assert RUNTIME_OS[PYTHON_RUNTIME].glibc >= (2, 28)
    layers = synth.resources("AWS::Lambda::LayerVersion")
    assert [layer["Properties"]["CompatibleRuntimes"] for layer in layers.values()] == [
        [PYTHON_RUNTIME]]
    python_functions = {f["Properties"].get("Runtime") for f
                        in synth.resources("AWS::Lambda::Function").values()
                        if str(f["Properties"].get("Runtime", "")).startswith("python")}
    assert python_functions == {PYTHON_RUNTIME}


def test_worker_matches_plan(synth: Synth) -> None:
    deployment = synth.settings.plan.deployment
    worker = _function(synth, "handlers.worker.handler")
    assert worker["MemorySize"] == deployment.memory_mb
    assert worker["Architectures"] == [deployment.arch]
    assert worker["Timeout"] == deployment.timeout_s
    assert worker["Runtime"] == PYTHON_RUNTIME == "python3.12"
    assert worker["EphemeralStorage"]["Size"] == ephemeral_storage_mb(synth.settings.plan)
    assert worker["EphemeralStorage"]["Size"] >= 512 + 1536  # torch unpack + data


def test_every_function_has_own_role_and_log_group(synth: Synth) -> None:
    functions = synth.resources("AWS::Lambda::Function")
    roles = {json.dumps(f["Properties"]["Role"]) for f in functions.values()}
    groups = {json.dumps(f["Properties"]["LoggingConfig"]["LogGroup"])
              for f in functions.values()}
    profiling = synth.stack.profiling
    extra = len(set(profiling.memories) - {synth.settings.plan.deployment.memory_mb}) \
        if profiling else 0  # one profiler per extra profiled memory
    # worker, trigger, finalize, profiler, and CDK's auto-delete function of the exchange bucket
    assert len(functions) == 5 + extra
    assert len(roles) == len(groups) == 5 + extra
    for role in synth.resources("AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]  # explicit statements only
    for group in synth.resources("AWS::Logs::LogGroup").values():
        assert group["Properties"]["RetentionInDays"] > 0


def test_trigger_carries_the_plan(synth: Synth) -> None:
    trigger = _function(synth, "handlers.trigger.handler")
    embedded = json.loads(trigger["Environment"]["Variables"]["FASDL_PLAN"])
    assert embedded == synth.settings.plan.to_dict()
    assert "VpcConfig" not in trigger  # it calls AWS APIs the isolated subnets cannot reach


def test_worker_and_finalize_in_vpc_only_for_valkey(synth: Synth) -> None:
    for handler in ("handlers.worker.handler", "handlers.finalize.handler"):
        function = _function(synth, handler)
        if synth.settings.plan.deployment.channel == "valkey":
            assert "VpcConfig" in function, handler
            assert "FASDL_CACHE_NAME" in function["Environment"]["Variables"]
        else:
            assert "VpcConfig" not in function, handler
            assert not synth.resources("AWS::EC2::VPC")


# ---- workflow --------------------------------------------------------------------------
def test_map_concurrency_is_w(synth: Synth) -> None:
    workers = synth.settings.plan.deployment.workers
    train = state_machine_definition(synth)["States"][workflow.TRAIN_SEGMENT]
    assert train["Type"] == "Map"
    assert train["MaxConcurrency"] == workers
    assert train["ItemsPath"] == "$.run.workers"
    mode = train["ItemProcessor"]["ProcessorConfig"]["Mode"]
    assert mode == ("DISTRIBUTED" if workers > 40 else "INLINE")
    if mode == "DISTRIBUTED":
        assert train["ItemProcessor"]["ProcessorConfig"]["ExecutionType"] == "STANDARD"


def test_state_machine_shape(synth: Synth) -> None:
    definition = state_machine_definition(synth)
    states = definition["States"]
    assert definition["StartAt"] == workflow.INITIALIZE
    assert {workflow.PLAN_RUN, workflow.MORE_SEGMENTS, workflow.TRAIN_SEGMENT,
            workflow.PLAN_NEXT, workflow.SHORTEN, workflow.COUNT, workflow.CONTINUE,
            workflow.FINALIZE, workflow.RECORD_FAILURE, workflow.FAILED} <= set(states)
    choice = states[workflow.MORE_SEGMENTS]
    limit = workflow.segments_per_execution(synth.settings.plan.deployment.workers)
    assert {"Variable": "$.count.segments", "NumericGreaterThanEquals": limit,
            "Next": workflow.CONTINUE} in choice["Choices"]
    assert choice["Default"] == workflow.TRAIN_SEGMENT
    retry = states[workflow.RETRY]
    assert retry["Parameters"] == {"action": "retry", "run.$": "$.run", "error.$": "$.error"}
    assert retry["Next"] == workflow.COUNT and retry["ResultPath"] == "$.run"
    assert retry["Catch"][-1]["Next"] == workflow.RECORD_FAILURE
    catches = states[workflow.TRAIN_SEGMENT]["Catch"]
    assert catches[-1] == {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error",
                           "Next": workflow.RECORD_FAILURE}
    worker = states[workflow.TRAIN_SEGMENT]["ItemProcessor"]["States"][segment_states.RUN_WORKER]
    assert [rule["ErrorEquals"] for rule in worker["Retry"]] == [
        list(retrier.errors) for retrier in workflow.RETRIERS]
    assert states[workflow.FAILED]["Type"] == "Fail"
    continue_as_new = states[workflow.CONTINUE]
    assert continue_as_new["Resource"].endswith(":states:::states:startExecution")
    assert continue_as_new["Parameters"]["StateMachineArn"].endswith(
        f":stateMachine:{workflow.state_machine_name(synth.stack.stack_name)}")


def test_history_budget_fits_the_limit() -> None:
    for workers in (1, 4, 40, 41, 1000):
        segments = workflow.segments_per_execution(workers)
        per_worker = 0 if workers > 40 else workflow.EVENTS_PER_WORKER_INLINE * workers
        assert segments >= 1
        assert segments * (workflow.EVENTS_PER_SEGMENT_FIXED + per_worker) <= 24_000


def test_state_machine_logging_and_tracing(synth: Synth) -> None:
    synth.template.has_resource_properties("AWS::StepFunctions::StateMachine", {
        "StateMachineType": "STANDARD",
        "TracingConfiguration": {"Enabled": True},
        "LoggingConfiguration": Match.object_like({"Level": "ALL"}),
    })


# ---- network and cache -----------------------------------------------------------------
def test_cache_absent_for_s3(s3_synth: Synth, wide_synth: Synth) -> None:
    for synth in (s3_synth, wide_synth):
        synth.template.resource_count_is("AWS::ElastiCache::ServerlessCache", 0)
        assert synth.cache is None and "CacheName" not in synth.json["Outputs"]


def test_cache_lives_in_its_own_stack(valkey_synth: Synth) -> None:
    """cdk destroy FasdlCacheStack stops the cache's billing: the training stack holds no
    cache and imports nothing from the cache stack, so the latter can always be deleted."""
    assert valkey_synth.cache is not None
    valkey_synth.template.resource_count_is("AWS::ElastiCache::ServerlessCache", 0)
    assert "Fn::ImportValue" not in json.dumps(valkey_synth.json)
    assert valkey_synth.cache.stack.stack_name == "FasdlCacheStack"
    name = cache_name(valkey_synth.stack.stack_name)
    (cache,) = valkey_synth.cache.resources("AWS::ElastiCache::ServerlessCache").values()
    assert cache["Properties"]["ServerlessCacheName"] == name
    assert valkey_synth.json["Outputs"]["CacheName"]["Value"] == name
    assert "CacheEndpoint" in valkey_synth.cache.json["Outputs"]
    # every function that talks to the cache knows it by that name, never by an address
    ours = [function["Properties"]["Environment"]["Variables"] for function
            in valkey_synth.resources("AWS::Lambda::Function").values()
            if "FASDL_CHANNEL" in function["Properties"].get("Environment", {}).get(
                "Variables", {})]
    assert len(ours) >= 4  # worker, trigger, finalize, profiler(s)
    for env in ours:
        assert env.get("FASDL_CACHE_NAME") == name and "FASDL_CACHE_ENDPOINT" not in env


def test_cache_sized_from_plan(valkey_synth: Synth) -> None:
    limits = cache_limits(valkey_synth.settings.plan)
    assert valkey_synth.cache is not None
    valkey_synth.cache.template.has_resource_properties("AWS::ElastiCache::ServerlessCache", {
        "Engine": "valkey", "MajorEngineVersion": "8",
        "CacheUsageLimits": {
            "DataStorage": {"Maximum": limits.storage_gb, "Unit": "GB"},
            "ECPUPerSecond": {"Maximum": limits.ecpu_per_second}},
    })
    assert 1 <= limits.storage_gb <= 5_000
    assert 1_000 <= limits.ecpu_per_second <= 15_000_000


def _exported(stack_json: dict[str, Any], imported: Any) -> str:
    """The logical id a cache-stack Fn::ImportValue refers to in the training stack."""
    name = imported["Fn::ImportValue"]
    for output in stack_json["Outputs"].values():
        if output.get("Export", {}).get("Name") == name:
            return _ref_of(stack_json["Resources"], output["Value"])
    raise AssertionError(f"no export named {name}")


def test_cache_admits_only_the_worker_sg(valkey_synth: Synth) -> None:
    resources = valkey_synth.json["Resources"]
    assert valkey_synth.cache is not None
    (cache,) = valkey_synth.cache.resources("AWS::ElastiCache::ServerlessCache").values()
    (cache_sg_ref,) = cache["Properties"]["SecurityGroupIds"]
    cache_sg = _exported(valkey_synth.json, cache_sg_ref)
    worker = _function(valkey_synth, "handlers.worker.handler")
    (worker_sg_ref,) = worker["VpcConfig"]["SecurityGroupIds"]
    worker_sg = _ref_of(resources, worker_sg_ref)
    assert "SecurityGroupIngress" not in resources[cache_sg]["Properties"]
    rules = [rule["Properties"] for rule in
             valkey_synth.resources("AWS::EC2::SecurityGroupIngress").values()
             if _ref_of(resources, rule["Properties"]["GroupId"]) == cache_sg]
    assert len(rules) == 1
    (rule,) = rules
    assert _ref_of(resources, rule["SourceSecurityGroupId"]) == worker_sg
    assert rule["FromPort"] == rule["ToPort"] == CACHE_PORT
    assert "CidrIp" not in rule
    # finalize deletes the run's keys: it sits in the VPC with the workers' security group
    finalize = _function(valkey_synth, "handlers.finalize.handler")
    assert finalize["VpcConfig"]["SecurityGroupIds"] == [worker_sg_ref]


def test_trigger_looks_up_only_its_cache(valkey_synth: Synth, s3_synth: Synth) -> None:
    def statements(synth: Synth) -> list[dict[str, Any]]:
        role = _ref_of(synth.json["Resources"],
                       _function(synth, "handlers.trigger.handler")["Role"])
        return [statement for policy in synth.resources("AWS::IAM::Policy").values()
                if {"Ref": role} in policy["Properties"]["Roles"]
                for statement in policy["Properties"]["PolicyDocument"]["Statement"]]

    lookups = [s for s in statements(valkey_synth)
               if s["Action"] == "elasticache:DescribeServerlessCaches"]
    assert len(lookups) == 1
    resource = json.dumps(lookups[0]["Resource"])
    assert f":serverlesscache:{cache_name(valkey_synth.stack.stack_name)}" in resource
    assert not [s for s in statements(s3_synth) if "elasticache" in json.dumps(s["Action"])]


def test_network_is_isolated(valkey_synth: Synth) -> None:
    template = valkey_synth.template
    template.resource_count_is("AWS::EC2::NatGateway", 0)
    template.resource_count_is("AWS::EC2::InternetGateway", 0)
    template.resource_count_is("AWS::EC2::FlowLog", 1)
    endpoints = valkey_synth.resources("AWS::EC2::VPCEndpoint").values()
    assert [e["Properties"]["VpcEndpointType"] for e in endpoints] == ["Gateway"]


# ---- storage ---------------------------------------------------------------------------
def test_every_bucket_denies_non_tls(synth: Synth) -> None:
    resources = synth.json["Resources"]
    buckets = set(synth.resources("AWS::S3::Bucket"))
    denied = set()
    for policy in synth.resources("AWS::S3::BucketPolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if (statement["Effect"] == "Deny" and statement["Condition"] == {
                    "Bool": {"aws:SecureTransport": "false"}}):
                denied.add(_ref_of(resources, policy["Properties"]["Bucket"]))
    assert buckets == denied
    for bucket in synth.resources("AWS::S3::Bucket").values():
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True}
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]


def test_removal_policies(s3_synth: Synth) -> None:
    buckets = s3_synth.resources("AWS::S3::Bucket")
    policies = {key.split("Bucket")[0]: value["DeletionPolicy"]
                for key, value in buckets.items()}
    assert policies == {"StorageAccessLogs": "Retain", "StorageDatasets": "Retain",
                        "StorageResults": "Retain", "StorageExchange": "Delete"}
    logged = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    assert len(logged) == 3  # all but the log bucket itself


# ---- IAM -------------------------------------------------------------------------------
def _statements(synth: Synth) -> list[dict[str, Any]]:
    found = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    for role in synth.resources("AWS::IAM::Role").values():
        for inline in role["Properties"].get("Policies", []):
            found.extend(inline["PolicyDocument"]["Statement"])
    return found


def test_wildcard_resources_only_where_required(synth: Synth) -> None:
    for statement in _statements(synth):
        resources = statement["Resource"]
        resources = resources if isinstance(resources, list) else [resources]
        actions = statement["Action"]
        actions = actions if isinstance(actions, list) else [actions]
        assert all("*" not in action for action in actions), statement
        if "*" in resources:
            assert set(actions) <= set(WILDCARD_RESOURCE_ACTIONS), statement


def test_outputs(synth: Synth) -> None:
    outputs = synth.json["Outputs"]
    for name in ("StateMachineArn", "DatasetsBucketName", "ResultsBucketName",
                 "ExchangeBucketName", "StartRunCommand"):
        assert name in outputs
    command = outputs["StartRunCommand"]["Value"]["Fn::Join"][1]
    assert command[0] == "aws stepfunctions start-execution --state-machine-arn "
    assert command[2] == " --input '{}'"


@pytest.mark.parametrize("workers,expected", [(4, 342), (40, 55), (41, 800)])
def test_segment_limits(workers: int, expected: int) -> None:
    assert workflow.segments_per_execution(workers) == expected


def test_valkey_worker_has_no_s3_exchange_access(valkey_synth: Synth, s3_synth: Synth) -> None:
    def worker_resources(synth: Synth) -> str:
        worker = _function(synth, "handlers.worker.handler")
        role = _ref_of(synth.json["Resources"], worker["Role"])
        policies = [p for p in synth.resources("AWS::IAM::Policy").values()
                    if any(r["Ref"] == role for r in p["Properties"]["Roles"])]
        return json.dumps(policies)

    assert "/exchange/*" not in worker_resources(valkey_synth)
    assert "/exchange/*" in worker_resources(s3_synth)


def test_map_results_stay_small(synth: Synth) -> None:
    train = state_machine_definition(synth)["States"][workflow.TRAIN_SEGMENT]
    run = train["ItemProcessor"]["States"][segment_states.RUN_WORKER]
    assert run["ResultPath"] is None
    if is_distributed_map(train):  # each child returns {worker, status, error}: tested apart
        assert "OutputPath" not in run and train["ResultPath"] == segment_states.OUTCOME_PATH
    else:
        assert run["OutputPath"] == "$.worker" and train["ResultPath"] is None


# ---- Lambda failures as AWS reports them (infra/lambda_errors.py) ------------------------
def _lambda_tasks(definition: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for state in definition["States"].values():
        if state.get("Type") == "Task" and ":lambda:" in state.get("Resource", ""):
            found.append(state)
        if "ItemProcessor" in state:
            found += _lambda_tasks(state["ItemProcessor"])
    return found


TRIGGER_ACTIONS = {"start", "next", "shorten", "retry", "outcome"}  # outcome: Summarize segment


def test_every_lambda_task_retries_service_errors_with_capped_jitter(synth: Synth) -> None:
    """Throttling, VPC networking not ready and Lambda's 5xx: nothing ran, so every Lambda
    task retries them, each with its own bounded, jittered schedule."""
    tasks = _lambda_tasks(state_machine_definition(synth))
    assert len(tasks) >= 6  # plan run, worker, next, shorten, retry, finalize, record failure
    for task in tasks:
        rules = {tuple(rule["ErrorEquals"]): rule for rule in task["Retry"]}
        throttled = rules[(lambda_errors.THROTTLED,)]
        assert throttled["MaxAttempts"] >= 8 and throttled["MaxDelaySeconds"] <= 60
        assert throttled["JitterStrategy"] == "FULL"
        not_ready = rules[(lambda_errors.NOT_READY, lambda_errors.ENI_NOT_READY)]
        assert 30 <= not_ready["IntervalSeconds"] <= not_ready["MaxDelaySeconds"] <= 60
        transient = rules[lambda_errors.TRANSIENT]
        assert "Lambda.ClientExecutionTimeoutException" in transient["ErrorEquals"]
        # Function errors are the workflow's to handle, never blindly retried here; the
        # trigger's own "not ready yet" (worker Pending, cache being created) is the exception.
        retried = {name for rule in task["Retry"] for name in rule["ErrorEquals"]}
        not_ready = set(workflow.NOT_READY_RETRIER.errors)
        is_trigger = task["Parameters"].get("action") in TRIGGER_ACTIONS
        # the VPC failures a retry cannot cure (no free IP addresses, ...) fail the run, named
        curable = set(lambda_errors.SERVICE_ERRORS) - set(lambda_errors.VPC_FAILURES)
        assert retried == curable | (not_ready if is_trigger else set())
        if is_trigger:
            assert task["Retry"][0]["IntervalSeconds"] == 30
            assert workflow.NOT_READY_RETRIER.worst_case_wait_s() == 300
    # The documented bound: a throttled task gives up after at most ~6 minutes of waiting.
    assert workflow.RETRIERS[0].worst_case_wait_s() <= 400


def test_out_of_memory_fails_fast_with_what_to_do(synth: Synth) -> None:
    states = state_machine_definition(synth)["States"]
    inner = states[workflow.TRAIN_SEGMENT]["ItemProcessor"]["States"]
    catches = {tuple(c["ErrorEquals"]): c["Next"]
               for c in inner[segment_states.RUN_WORKER]["Catch"]}
    assert catches[(lambda_errors.OUT_OF_MEMORY,)] == segment_states.WORKER_OUT_OF_MEMORY
    memory = synth.settings.plan.deployment.memory_mb
    if is_distributed_map(states[workflow.TRAIN_SEGMENT]):
        worker = inner[segment_states.WORKER_OUT_OF_MEMORY]
        assert worker["Type"] == "Pass"
        assert worker["Parameters"]["status"] == OUT_OF_MEMORY.status
        failed = states[OUT_OF_MEMORY.segment_state_name]
        assert failed["Next"] == workflow.RECORD_FAILURE
        assert failed["Parameters"]["Error"] == segment_states.OUT_OF_MEMORY_ERROR
        cause = failed["Parameters"]["Cause.$"]
    else:
        failed = inner[segment_states.WORKER_OUT_OF_MEMORY]
        assert failed["Error"] == segment_states.OUT_OF_MEMORY_ERROR
        cause = failed["CausePath"]
    assert f"M = {memory} MB" in cause
    assert f"memory_mb to {next_memory_mb(memory)}" in cause
    # Not a crash: the Map's crash catch (same segment again) must not take it.
    segment_catches = states[workflow.TRAIN_SEGMENT].get("Catch", [])
    retried = {n for c in segment_catches if c["Next"] != workflow.RECORD_FAILURE
               for n in c["ErrorEquals"]}
    assert segment_states.OUT_OF_MEMORY_ERROR not in retried
    assert lambda_errors.OUT_OF_MEMORY not in retried


def test_lambda_unknown_is_classified_by_its_cause(synth: Synth) -> None:
    inner = state_machine_definition(synth)["States"][workflow.TRAIN_SEGMENT][
        "ItemProcessor"]["States"]
    catches = {tuple(c["ErrorEquals"]): c["Next"]
               for c in inner[segment_states.RUN_WORKER]["Catch"]}
    assert catches[(lambda_errors.UNKNOWN,)] == segment_states.CLASSIFY_UNKNOWN
    choice = inner[segment_states.CLASSIFY_UNKNOWN]
    assert [(c["StringMatches"], c["Next"]) for c in choice["Choices"]] == [
        (lambda_errors.TIMEOUT_CAUSE, segment_states.WORKER_TIMED_OUT),
        (lambda_errors.OUT_OF_MEMORY_CAUSE, segment_states.WORKER_OUT_OF_MEMORY)]
    assert choice["Default"] == segment_states.WORKER_CRASHED
