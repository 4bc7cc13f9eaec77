"""The training state machine (Step Functions Standard, JSONPath).

States::

    Initialize -> Plan run -> More segments? --done--> Finalize run -> Run succeeded
                                |   ^   \\--budget spent--> Continue as new -> Continued
                                v   |
                     Train segment (Map over W workers; Distributed when W > 40)
                        | ok              | worker timed out     | worker crashed
                     Plan next segment  Shorten segment        Retry segment
                        \\------------> Count segment <-----------/
    any other error (Catch) -> Record failure -> Run failed

A crashed worker (process died: ``Runtime.ExitError``; or a peer gave up waiting for its
shards: ``ChannelTimeout``/``ChannelError``) reruns the same segment from its checkpoint
(trigger action ``retry``, bounded); a Distributed Map reports both kinds only as
``States.ExceedToleratedFailureThreshold``, which shortens (also bounded).

Execution input (every field optional; ``{}`` runs the deployed plan on its dataset)::

    {"run_id": "digits-1",          # default: the execution name
     "epochs": 3,                   # overrides training.epochs
     "dataset": "datasets/digits",  # overrides workload.dataset (key prefix, datasets bucket)
     "plan": {...}}                 # a whole plan; its deployment must match the stack's

``resume`` is reserved: "Continue as new" starts a fresh execution with
``{"resume": <run state>}`` before the 25,000-event history limit. The run state (``$.run``)
is what the trigger returns; every field each Lambda receives and returns is in
:mod:`infra.contract`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from infra import lambda_errors

INLINE_MAP_MAX_WORKERS = 40  # inline Map runs at most 40 iterations at once
HISTORY_BUDGET = 24_000  # of the 25,000-event hard limit; the rest covers start/finish/failure
EVENTS_PER_WORKER_INLINE = 10  # 7 per iteration (entered, scheduled, started, ...) + retry slack
EVENTS_PER_SEGMENT_FIXED = 30  # Map, trigger task, Count, Choice; Distributed MapRun events
# SegmentTooLong: a worker that sees it cannot finish the segment in time fails fast on its own.
TIMEOUT_ERRORS = [lambda_errors.TASK_TIMEOUT, lambda_errors.TIMEOUT, "SegmentTooLong"]
SEGMENT_TIMEOUT_ERROR = "FasDL.SegmentTimeout"
# A worker process died or a peer's shards never came: rerun the segment at the same length
# from its checkpoint (the trigger bounds these retries too).
CRASH_ERRORS = [lambda_errors.EXIT, "ChannelTimeout", "ChannelError"]
WORKER_CRASHED_ERROR = "FasDL.WorkerCrashed"
# Out of memory: the same segment at the same M would die again, so the run fails at once.
OUT_OF_MEMORY_ERROR = "FasDL.WorkerOutOfMemory"
# A Distributed Map reports any failed child only as this error; the trigger bounds the
# shortened retries, so a real bug still ends on the failure path.
DISTRIBUTED_FAILURE = "States.ExceedToleratedFailureThreshold"
RUN_FAILED_ERROR = "FasDL.RunFailed"
CLASSIFY_UNKNOWN = "Classify worker failure"


@dataclass(frozen=True)
class Retrier:
    """One Retry rule of every Lambda task; the worst-case total wait is documented."""

    errors: tuple[str, ...]
    interval_s: int
    max_attempts: int
    backoff: float
    max_delay_s: int

    def worst_case_wait_s(self) -> float:
        return sum(min(self.interval_s * self.backoff ** k, self.max_delay_s)
                   for k in range(self.max_attempts))


# The Invoke call failed and nothing ran, so retrying is always safe. Full jitter spreads the
# W workers' retries; waits are capped so a retried worker rejoins its waiting peers soon.
RETRIERS = (
    # Throttled (account or function concurrency): many patient attempts, at most ~6 min.
    Retrier((lambda_errors.THROTTLED,), interval_s=2, max_attempts=10, backoff=2.0,
            max_delay_s=60),
    # A VPC function's network interface is being (re)created: retry every 30-60 s.
    Retrier((lambda_errors.NOT_READY, lambda_errors.ENI_NOT_READY), interval_s=30,
            max_attempts=6, backoff=1.5, max_delay_s=60),
    # Lambda's transient 5xx (bp-lambda-serviceexception: 2 s, 6 attempts, backoff 2).
    Retrier(lambda_errors.TRANSIENT, interval_s=2, max_attempts=6, backoff=2.0,
            max_delay_s=30),
)
TASK_TIMEOUT_SLACK_S = 60
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
STATE_MACHINE_ID = "StateMachine"
LOG_GROUP_ID = "ExecutionLogs"

# State names: read in the console and in local/ tests, so keep them stable.
INITIALIZE = "Initialize"
PLAN_RUN = "Plan run"
MORE_SEGMENTS = "More segments?"
TRAIN_SEGMENT = "Train segment"
RUN_WORKER = "Run worker"
WORKER_TIMED_OUT = "Worker timed out"
PLAN_NEXT = "Plan next segment"
SHORTEN = "Shorten segment"
WORKER_CRASHED = "Worker crashed"
WORKER_OUT_OF_MEMORY = "Worker out of memory"
RETRY = "Retry segment"
COUNT = "Count segment"
CONTINUE = "Continue as new"
CONTINUED = "Continued in new execution"
FINALIZE = "Finalize run"
SUCCEEDED = "Run succeeded"
RECORD_FAILURE = "Record failure"
FAILED = "Run failed"


def add_lambda_retries(task: tasks.LambdaInvoke) -> None:
    """The Retry rules of :data:`RETRIERS`, in order, with full jitter."""
    for retrier in RETRIERS:
        task.add_retry(errors=list(retrier.errors),
                       interval=Duration.seconds(retrier.interval_s),
                       max_attempts=retrier.max_attempts, backoff_rate=retrier.backoff,
                       max_delay=Duration.seconds(retrier.max_delay_s),
                       jitter_strategy=sfn.JitterType.FULL)


def next_memory_mb(memory_mb: int) -> int:
    """A quarter more, on Lambda's 128-MB grid the planner uses, at most 10,240 MB."""
    return min(10_240, math.ceil(memory_mb * 1.25 / 128) * 128)


def is_distributed(workers: int) -> bool:
    return workers > INLINE_MAP_MAX_WORKERS


def segments_per_execution(workers: int) -> int:
    """Segments one execution may run before it continues as new (history-limit guard)."""
    per_worker = 0 if is_distributed(workers) else EVENTS_PER_WORKER_INLINE * workers
    return max(1, HISTORY_BUDGET // (EVENTS_PER_SEGMENT_FIXED + per_worker))


def state_machine_name(stack_name: str) -> str:
    # A fixed name lets "Continue as new" reference this machine without a template cycle.
    return f"{stack_name}-training"


class TrainingWorkflow(Construct):
    """Segments of W concurrent workers, looped by a Choice, finished by finalize."""

    def __init__(self, scope: Construct, construct_id: str, *, workers: int, timeout_s: int,
                 trigger: lambda_.IFunction, worker: lambda_.IFunction,
                 finalize: lambda_.IFunction, memory_mb: int) -> None:
        super().__init__(scope, construct_id)
        self._workers = workers
        self._memory_mb = memory_mb
        self._timeout_s = timeout_s
        self._trigger = trigger
        self._worker = worker
        self._finalize = finalize
        self.name = state_machine_name(Stack.of(self).stack_name)
        self.segment_limit = segments_per_execution(workers)
        self.log_group = logs.LogGroup(self, LOG_GROUP_ID, retention=LOG_RETENTION,
                                       removal_policy=RemovalPolicy.DESTROY)
        self.state_machine = self._build_state_machine(self._build_definition())

    # ---- tasks ---------------------------------------------------------------------------
    def _invoke(self, state_name: str, function: lambda_.IFunction,
                payload: dict[str, object], *, result_path: str,
                output_path: str | None = None,
                task_timeout_s: int | None = None) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self, state_name, state_name=state_name, lambda_function=function,
            payload=sfn.TaskInput.from_object(payload), payload_response_only=True,
            retry_on_service_exceptions=False, result_path=result_path,
            output_path=output_path,
            task_timeout=(sfn.Timeout.duration(Duration.seconds(task_timeout_s))
                          if task_timeout_s else None))
        add_lambda_retries(task)
        return task

    def _build_record_failure(self) -> sfn.IChainable:
        record = self._invoke(RECORD_FAILURE, self._finalize, {
            "action": "failed", "state.$": "$", "execution.$": "$$.Execution.Id",
        }, result_path=sfn.JsonPath.DISCARD)
        failed = sfn.Fail(self, FAILED, state_name=FAILED, error=RUN_FAILED_ERROR,
                          cause="Training failed: see the execution history and "
                                "runs/<run_id>/failure.json in the results bucket")
        record.add_catch(failed, errors=["States.ALL"], result_path="$.record_error")
        return record.next(failed)

    def _build_worker_processor(self) -> sfn.IChainable:
        # The iteration outputs only its worker index: W results stay a few KB whatever the
        # worker returns (a Map's collected output counts against the 256 KiB limit).
        run = self._invoke(RUN_WORKER, self._worker, {
            "action": "train",
            "run_id.$": "$.run_id", "plan_key.$": "$.plan_key",
            "segment.$": "$.segment", "worker.$": "$.worker",
        }, result_path=sfn.JsonPath.DISCARD, output_path="$.worker",
            task_timeout_s=self._timeout_s + TASK_TIMEOUT_SLACK_S)
        # One name per kind of worker failure, whatever Lambda or the Task reported.
        timed_out = sfn.Fail(self, WORKER_TIMED_OUT, state_name=WORKER_TIMED_OUT,
                             error=SEGMENT_TIMEOUT_ERROR,
                             cause="A worker hit its timeout; the segment is retried shorter")
        run.add_catch(timed_out, errors=TIMEOUT_ERRORS)
        crashed = sfn.Fail(self, WORKER_CRASHED, state_name=WORKER_CRASHED,
                           error=WORKER_CRASHED_ERROR,
                           cause="A worker died or its peers' shards never came; the segment "
                                 "is retried from its checkpoint")
        run.add_catch(crashed, errors=CRASH_ERRORS)
        out_of_memory = self._build_out_of_memory()
        run.add_catch(out_of_memory, errors=[lambda_errors.OUT_OF_MEMORY],
                      result_path="$.failure")
        # The optimized integration reports all three as Lambda.Unknown: tell them apart.
        classify = sfn.Choice(self, CLASSIFY_UNKNOWN, state_name=CLASSIFY_UNKNOWN)
        classify.when(sfn.Condition.string_matches("$.failure.Cause",
                                                   lambda_errors.TIMEOUT_CAUSE), timed_out)
        classify.when(sfn.Condition.string_matches("$.failure.Cause",
                                                   lambda_errors.OUT_OF_MEMORY_CAUSE),
                      out_of_memory)
        classify.otherwise(crashed)
        run.add_catch(classify, errors=[lambda_errors.UNKNOWN], result_path="$.failure")
        return run

    def _build_out_of_memory(self) -> sfn.Fail:
        """Fail fast, naming the worker, its memory size and the next size to plan with."""
        memory = self._memory_mb
        suggested = next_memory_mb(memory)
        return sfn.Fail(
            self, WORKER_OUT_OF_MEMORY, state_name=WORKER_OUT_OF_MEMORY,
            error=OUT_OF_MEMORY_ERROR,
            cause_path=sfn.JsonPath.format(
                f"Worker {{}} ran out of memory at the planned M = {memory} MB "
                f"({lambda_errors.OUT_OF_MEMORY}; its peak is the Max Memory Used of its last "
                f"REPORT log line). Retrying at the same size would fail again: set "
                f"deployment.memory_mb to {suggested} in plan.json (or re-profile the workload, "
                f"docs/profiling.md) and deploy again. Lambda said: {{}}",
                sfn.JsonPath.string_at("$.worker"),
                sfn.JsonPath.string_at("$.failure.Cause")))

    def _build_train_segment(self) -> sfn.Map | sfn.DistributedMap:
        selector = {
            "run_id.$": "$.run.run_id", "plan_key.$": "$.run.plan_key",
            "segment.$": "$.run.segment", "worker.$": "$$.Map.Item.Value",
        }
        processor = self._build_worker_processor()
        if is_distributed(self._workers):
            distributed = sfn.DistributedMap(
                self, TRAIN_SEGMENT, state_name=TRAIN_SEGMENT, items_path="$.run.workers",
                item_selector=selector, max_concurrency=self._workers,
                map_execution_type=sfn.StateMachineType.STANDARD,  # workers outlive Express
                result_path=sfn.JsonPath.DISCARD)
            return distributed.item_processor(processor)
        inline = sfn.Map(self, TRAIN_SEGMENT, state_name=TRAIN_SEGMENT,
                         items_path="$.run.workers", item_selector=selector,
                         max_concurrency=self._workers, result_path=sfn.JsonPath.DISCARD)
        return inline.item_processor(processor)

    def _build_continue(self) -> tasks.StepFunctionsStartExecution:
        # Imported by name: referencing the machine being defined would be a template cycle.
        own = sfn.StateMachine.from_state_machine_name(self, "Self", self.name)
        return tasks.StepFunctionsStartExecution(
            self, CONTINUE, state_name=CONTINUE, state_machine=own,
            input=sfn.TaskInput.from_object({"resume.$": "$.run"}),
            associate_with_parent=True, result_path=sfn.JsonPath.DISCARD)

    # ---- definition ----------------------------------------------------------------------
    def _build_definition(self) -> sfn.IChainable:
        record_failure = self._build_record_failure()
        initialize = sfn.Pass(self, INITIALIZE, state_name=INITIALIZE, parameters={
            "input.$": "$", "count": {"segments": 0}})
        plan_run = self._invoke(PLAN_RUN, self._trigger, {
            "action": "start", "input.$": "$.input", "execution.$": "$$.Execution.Name",
        }, result_path="$.run")
        train = self._build_train_segment()
        plan_next = self._invoke(PLAN_NEXT, self._trigger, {
            "action": "next", "run.$": "$.run"}, result_path="$.run")
        shorten = self._invoke(SHORTEN, self._trigger, {
            "action": "shorten", "run.$": "$.run", "error.$": "$.error"},
            result_path="$.run")
        retry = self._invoke(RETRY, self._trigger, {
            "action": "retry", "run.$": "$.run", "error.$": "$.error"},
            result_path="$.run")
        count = sfn.Pass(self, COUNT, state_name=COUNT, result_path="$.count",
                         parameters={"segments.$": "States.MathAdd($.count.segments, 1)"})
        finalize = self._invoke(FINALIZE, self._finalize, {
            "action": "succeeded", "run.$": "$.run", "execution.$": "$$.Execution.Id",
        }, result_path="$.result")
        succeeded = sfn.Succeed(self, SUCCEEDED, state_name=SUCCEEDED, output_path="$.result")
        continue_as_new = self._build_continue()
        continued = sfn.Succeed(self, CONTINUED, state_name=CONTINUED)

        timeouts = [SEGMENT_TIMEOUT_ERROR, *TIMEOUT_ERRORS]
        if is_distributed(self._workers):
            timeouts.append(DISTRIBUTED_FAILURE)
        train.add_catch(shorten, errors=timeouts, result_path="$.error")
        train.add_catch(retry, errors=[WORKER_CRASHED_ERROR, *CRASH_ERRORS],
                        result_path="$.error")
        catching: list[sfn.TaskStateBase | sfn.Map | sfn.DistributedMap] = [
            plan_run, train, plan_next, shorten, retry, finalize, continue_as_new]
        for state in catching:
            state.add_catch(record_failure, errors=["States.ALL"], result_path="$.error")

        more = sfn.Choice(self, MORE_SEGMENTS, state_name=MORE_SEGMENTS)
        more.when(sfn.Condition.boolean_equals("$.run.done", True), finalize.next(succeeded))
        more.when(sfn.Condition.number_greater_than_equals("$.count.segments",
                                                           self.segment_limit),
                  continue_as_new.next(continued))
        more.otherwise(train)
        train.next(plan_next)
        plan_next.next(count)
        shorten.next(count)
        retry.next(count)
        count.next(more)
        return initialize.next(plan_run).next(more)

    def _build_state_machine(self, definition: sfn.IChainable) -> sfn.StateMachine:
        return sfn.StateMachine(
            self, STATE_MACHINE_ID,
            state_machine_name=self.name,
            state_machine_type=sfn.StateMachineType.STANDARD,  # 1 year, exactly-once tasks
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL,
                                include_execution_data=True),
            tracing_enabled=True,
            comment="FasDL training: segments of W concurrent K-REDUCE workers",
        )
