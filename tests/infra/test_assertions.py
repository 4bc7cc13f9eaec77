"""Fine-grained assertions: the template implements the plan (functions, the workflow, its
retries and limits); the security decisions are in test_security_assertions.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from fasdl.contract.cache import MAX_CACHE_WAIT_S
from fasdl.contract.errors import CacheWarming, next_memory_mb
from infra import lambda_errors, segment_states, workflow
from infra.compute import ephemeral_storage_mb
from infra.lambda_runtime import PYTHON_RUNTIME, RUNTIME_OS
from infra.segment_states import OUT_OF_MEMORY
from tests.infra.conftest import (
    Synth,
    function_props,
    is_distributed_map,
    state_machine_definition,
)


# ---- compute ---------------------------------------------------------------------------
def test_every_function_and_the_layer_run_on_amazon_linux_2023(synth: Synth) -> None:
    """torch 2.13 / numpy 2.x need glibc >= 2.28: python3.11 (Amazon Linux 2, 2.26) cannot
    load them, so no function of ours may use it, and the layer must declare the same."""
    ours = {logical: f["Properties"] for logical, f
            in synth.resources("AWS::Lambda::Function").items()
            if str(f["Properties"].get("Handler", "")).startswith(("handlers.", "replan."))}
    assert len(ours) >= 4, sorted(ours)  # worker, trigger, finalize, profiler(s), re-plan
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
    worker = function_props(synth, "handlers.worker.handler")
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
    extra += synth.stack.replan is not None  # an adaptive plan's re-plan function
    # worker, trigger, finalize, profiler, and CDK's auto-delete function of the exchange bucket
    assert len(functions) == 5 + extra
    assert len(roles) == len(groups) == 5 + extra
    for role in synth.resources("AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]  # explicit statements only
    for group in synth.resources("AWS::Logs::LogGroup").values():
        assert group["Properties"]["RetentionInDays"] > 0


def test_trigger_carries_the_plan(synth: Synth) -> None:
    trigger = function_props(synth, "handlers.trigger.handler")
    embedded = json.loads(trigger["Environment"]["Variables"]["FASDL_PLAN"])
    assert embedded == synth.settings.plan.to_dict()
    assert "VpcConfig" not in trigger  # it calls AWS APIs the isolated subnets cannot reach


def test_worker_and_finalize_in_vpc_only_for_valkey(synth: Synth) -> None:
    for handler in ("handlers.worker.handler", "handlers.finalize.handler"):
        function = function_props(synth, handler)
        if synth.settings.plan.deployment.channel == "valkey":
            assert "VpcConfig" in function, handler
            assert "FASDL_CACHE_NAME" in function["Environment"]["Variables"]
        else:
            assert "VpcConfig" not in function, handler
            assert not synth.resources("AWS::EC2::VPC")


# ---- workflow --------------------------------------------------------------------------
def test_map_concurrency_is_w(synth: Synth) -> None:
    workers = synth.settings.plan.deployment.ceiling  # an adaptive run's W at most
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
    limit = workflow.segments_per_execution(synth.settings.plan.deployment.ceiling)
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
@pytest.mark.parametrize("workers,expected", [(4, 342), (40, 55), (41, 800)])
def test_segment_limits(workers: int, expected: int) -> None:
    assert workflow.segments_per_execution(workers) == expected


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
        not_ready = {*workflow.NOT_READY_RETRIER.errors,
                     *workflow.CACHE_WARMING_RETRIER.errors}
        is_trigger = task["Parameters"].get("action") in TRIGGER_ACTIONS
        # the VPC failures a retry cannot cure (no free IP addresses, ...) fail the run, named
        curable = set(lambda_errors.SERVICE_ERRORS) - set(lambda_errors.VPC_FAILURES)
        assert retried == curable | (not_ready if is_trigger else set())
        if is_trigger:
            assert task["Retry"][0]["IntervalSeconds"] == 30
            assert workflow.NOT_READY_RETRIER.worst_case_wait_s() == 300
            # a plan waiting for its cache's pre-scaled minimum: asked every 30 s, no
            # jitter, for at least the longest wait a plan may hold
            warming = rules[(CacheWarming.__name__,)]
            assert warming["IntervalSeconds"] == 30 and warming["JitterStrategy"] == "NONE"
            assert warming["MaxAttempts"] * 30 >= MAX_CACHE_WAIT_S >= 3_600
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
