"""The profiling state machine (opt-in: ``-c profiling=true`` or ``-c profile_memories=...``).

Lambda fixes memory per function version, so the stack deploys ONE PROFILER FUNCTION PER
MEMORY SIZE (the plan's memory reuses the stack's profiler). Chosen over "update the function's
memory, publish a version, invoke it" (AWS Lambda Power Tuning's way) because every memory
then runs in parallel, the state machine needs no lambda:UpdateFunctionConfiguration or
PublishVersion rights, nothing drifts from the CloudFormation template, and two profiling runs
cannot race on one function's configuration. The price: the memories are fixed at deploy time
(redeploy with another ``profile_memories`` list to profile others) and each costs an idle
function, a role and a log group (no charge while idle).

States::

    Set defaults -> Merge input -> Find exchange cache (trigger: the Valkey endpoint or null)
    -> Profile each memory (Map over config.memories)
        each item: Route by memory? --<M>--> Profile at <M> MB
                                    \\--otherwise--> Memory not deployed (Fail)
    -> Collect samples -> Profile ready   (output: {"samples_key", "bucket", "lines", ...})

Execution input (every field optional; defaults in :data:`DEFAULT_INPUT`)::

    {"memories": [1024, 2048], "model": "cnn", "dataset": "cifar10", "batches": [16, 32],
     "sizes_mb": [1, 4, 16], "warmup": 2, "repeats": 5, "transfer_repeats": 3,
     "channels": ["s3"], "input_shape": [3, 32, 32], "num_classes": 10,
     "profile_id": "<default: the execution name>"}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from infra import access
from infra.compute import LONG_TIMEOUT, Compute
from infra.settings import SynthSettingsError
from infra.storage import Storage
from infra.workflow import LOG_RETENTION, TASK_TIMEOUT_SLACK_S, add_lambda_retries

CONTEXT_PROFILING = "profiling"
CONTEXT_MEMORIES = "profile_memories"
DEFAULT_MEMORIES: tuple[int, ...] = (1024, 2048, 4096, 6144, 8192, 10240)
MIN_MEMORY_MB, MAX_MEMORY_MB = 128, 10_240
DEFAULT_INPUT: dict[str, Any] = {
    "model": "cnn", "dataset": "cifar10", "batches": [16, 32, 64, 128],
    "sizes_mb": [0.0625, 0.25, 1, 4, 16, 64], "warmup": 2, "repeats": 5, "transfer_repeats": 3,
    "channels": None,  # every channel the deployment can reach
}
MEMORY_NOT_DEPLOYED_ERROR = "FasDL.MemoryNotDeployed"

# State names (console, tests).
SET_DEFAULTS = "Set defaults"
MERGE_INPUT = "Merge input"
PROFILE_EACH = "Profile each memory"
ROUTE = "Route by memory?"
NOT_DEPLOYED = "Memory not deployed"
COLLECT = "Collect samples"
FIND_CACHE = "Find exchange cache"
READY = "Profile ready"


def state_machine_name(stack_name: str) -> str:
    return f"{stack_name}-profiling"


def profile_state(memory_mb: int) -> str:
    return f"Profile at {memory_mb} MB"


def profiling_memories(context: dict[str, object], plan_memory_mb: int) -> tuple[int, ...]:
    """Memories to deploy profilers for; () when profiling is off (the default)."""
    listed = context.get(CONTEXT_MEMORIES)
    enabled = str(context.get(CONTEXT_PROFILING) or "").lower() in ("1", "true", "yes")
    if not listed and not enabled:
        return ()
    if not listed:
        values: list[object] = list(DEFAULT_MEMORIES)
    elif isinstance(listed, (list, tuple)):
        values = list(listed)
    else:
        values = [part.strip() for part in str(listed).split(",") if part.strip()]
    memories: set[int] = {plan_memory_mb}
    for value in values:
        try:
            memory = int(str(value))
        except ValueError:
            memory = 0
        if not MIN_MEMORY_MB <= memory <= MAX_MEMORY_MB:
            raise SynthSettingsError(f"context '{CONTEXT_MEMORIES}': every memory must be an "
                                f"integer MB in [{MIN_MEMORY_MB}, {MAX_MEMORY_MB}], "
                                f"got {value!r}")
        memories.add(memory)
    return tuple(sorted(memories))


class ProfilingWorkflow(Construct):
    """Profiler functions per memory and the state machine that runs and collects them."""

    def __init__(self, scope: Construct, construct_id: str, *, plan_memory_mb: int,
                 ephemeral_mb: int, compute: Compute, storage: Storage,
                 memories: Sequence[int]) -> None:
        super().__init__(scope, construct_id)
        self._trigger = compute.trigger
        self.memories = tuple(memories)
        self.functions: dict[int, lambda_.IFunction] = {}
        for memory in self.memories:
            self.functions[memory] = (compute.profiler if memory == plan_memory_mb
                                      else _add_profiler(compute, storage, ephemeral_mb, memory))
        self.log_group = logs.LogGroup(self, "ExecutionLogs", retention=LOG_RETENTION,
                                       removal_policy=RemovalPolicy.DESTROY)
        self.state_machine = sfn.StateMachine(
            self, "StateMachine",
            state_machine_name=state_machine_name(Stack.of(self).stack_name),
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_chainable(
                self._definition(compute.profiler)),
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL,
                                include_execution_data=True),
            tracing_enabled=True,
            comment="FasDL profiler: train/memory/transfer samples per Lambda memory size",
        )

    def _invoke(self, state_name: str, function: lambda_.IFunction,
                payload: dict[str, object], result_path: str) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self, state_name, state_name=state_name, lambda_function=function,
            payload=sfn.TaskInput.from_object(payload), payload_response_only=True,
            retry_on_service_exceptions=False, result_path=result_path,
            task_timeout=sfn.Timeout.duration(
                LONG_TIMEOUT.plus(Duration.seconds(TASK_TIMEOUT_SLACK_S))))
        add_lambda_retries(task, trigger=function is self._trigger)
        return task

    def _definition(self, collector: lambda_.IFunction) -> sfn.IChainable:
        defaults = sfn.Pass(self, SET_DEFAULTS, state_name=SET_DEFAULTS, result_path="$.defaults",
                            parameters={**DEFAULT_INPUT, "memories": list(self.memories),
                                        "profile_id.$": "$$.Execution.Name"})
        # Input keys win over defaults (a shallow merge: lists are replaced, not extended).
        merge = sfn.Pass(self, MERGE_INPUT, state_name=MERGE_INPUT, parameters={
            "config.$": "States.JsonMerge($.defaults, $$.Execution.Input, false)"})
        route = sfn.Choice(self, ROUTE, state_name=ROUTE)
        for memory, function in self.functions.items():
            route.when(sfn.Condition.number_equals("$.memory_mb", memory),
                       self._invoke(profile_state(memory), function, {
                           "action": "profile", "memory_mb.$": "$.memory_mb",
                           "config.$": "$.config", "cache.$": "$.cache"}, result_path="$"))
        route.otherwise(sfn.Fail(
            self, NOT_DEPLOYED, state_name=NOT_DEPLOYED, error=MEMORY_NOT_DEPLOYED_ERROR,
            cause=f"No profiler function for this memory; deployed: "
                  f"{', '.join(map(str, self.memories))} MB (redeploy with "
                  f"-c {CONTEXT_MEMORIES}=...)"))
        each = sfn.Map(self, PROFILE_EACH, state_name=PROFILE_EACH,
                       items_path="$.config.memories", max_concurrency=len(self.memories),
                       item_selector={"memory_mb.$": "$$.Map.Item.Value",
                                      "config.$": "$.config", "cache.$": "$.found.cache"},
                       result_path="$.profiled")
        each.item_processor(route)
        collect = self._invoke(COLLECT, collector, {
            "action": "collect", "profile_id.$": "$.config.profile_id",
            "memories.$": "$.config.memories"}, result_path="$.collected")
        ready = sfn.Succeed(self, READY, state_name=READY, output_path="$.collected")
        # Valkey stacks: the cache's endpoint (FasdlCacheStack), as the trigger finds it for
        # a training run; null otherwise. The profilers' subnets cannot reach the API.
        find_cache = self._invoke(FIND_CACHE, self._trigger, {"action": "cache"},
                                  result_path="$.found")
        return defaults.next(merge).next(find_cache).next(each).next(collect).next(ready)


def _add_profiler(compute: Compute, storage: Storage, ephemeral_mb: int,
                  memory_mb: int) -> lambda_.Function:
    """A profiler like the stack's own, at another memory (own role and log group)."""
    function = compute.build_profiler(memory_mb, timeout=LONG_TIMEOUT, ephemeral_mb=ephemeral_mb)
    access.grant_profiler(compute.roles[f"Profiler{memory_mb}"], datasets=storage.datasets,
                          results=storage.results, exchange=storage.exchange)
    return function
