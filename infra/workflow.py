"""The training state machine (Step Functions Standard, JSONPath).

States::

    Initialize -> Plan run -> More segments? --done--> Finalize run -> Run succeeded
                                |   ^   \\--budget spent--> Continue as new -> Continued
                                v   |
                     Train segment (Map over W workers; Distributed when W > 40, then
                        |           Summarize segment -> Segment outcome?)
                        | ok              | worker timed out     | worker crashed
                     Plan next segment  Shorten segment        Retry segment
                        \\------------> Count segment <-----------/
    out of memory, any other error -> Record failure -> Run failed
    Plan run --RunExists--> Run exists (Fail: the run id is another execution's; no finalize)
    Plan next segment --deadline or budget would be passed--> Record stop -> Which limit?
        -> Deadline exceeded | Budget exceeded (infra/guard_states.py)
    An adaptive plan (training.adaptive not off): Plan next segment -> Re-plan segment ->
        Count segment and Plan run -> Re-plan resumed segment -> More segments? (infra/replan.py:
        the segment as issued, cut, or on a changed plan; a fresh run's first passes through)

A crashed worker (process died: ``Runtime.ExitError``; or a peer gave up waiting for its
shards: ``ChannelTimeout``/``ChannelError``) reruns the same segment from its checkpoint
(trigger action ``retry``, bounded). The inline Map learns the kind from its Catch; the
Distributed Map's children never fail and the ``Segment outcome?`` Choice reads their
statuses instead (:mod:`infra.segment_states`, which names every kind once for both).

Execution input (every field optional; ``{}`` runs the deployed plan on its dataset)::

    {"run_id": "digits-1",          # default: the execution name
     "epochs": 3,                   # overrides training.epochs
     "dataset": "datasets/digits",  # overrides workload.dataset (key prefix, datasets bucket)
     "plan": {...}}                 # a whole plan; its deployment must match the stack's

``resume`` is reserved: "Continue as new" starts a fresh execution with
``{"resume": <run state>}`` before the 25,000-event history limit. The run state (``$.run``)
is what the trigger returns; every field each Lambda receives and returns is in
:mod:`fasdl.contract.events`.
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

from fasdl.contract import events
from fasdl.contract.cache import CACHE_WAIT_POLL_S, MAX_CACHE_WAIT_S
from fasdl.contract.errors import CacheNotReady, CacheWarming, RunExists, WorkerNotReady
from infra import guard_states, lambda_errors
from infra.segment_states import (
    CRASHED,
    OUTCOME_PATH,
    RUN_WORKER,
    SUMMARIZE_SEGMENT,
    TIMED_OUT,
    distributed_processor,
    inline_processor,
    outcome_choice,
    summary_payload,
)
from infra.settings import INLINE_MAP_LIMIT

HISTORY_BUDGET = 24_000  # of the 25,000-event hard limit; the rest covers start/finish/failure
EVENTS_PER_WORKER_INLINE = 10  # 7 per iteration (entered, scheduled, started, ...) + retry slack
EVENTS_PER_SEGMENT_FIXED = 30  # Map, trigger task, Count, Choice; Distributed MapRun events
RUN_FAILED_ERROR = "FasDL.RunFailed"
# "States.ALL ... can't catch the States.DataLimitExceeded terminal error or Runtime error
# types" (https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html),
# so every catch that leads to Record failure names it too. The same page says a
# States.Runtime error always fails the execution: the real guard is that no state reads a
# path that may be missing (Summarize segment returns every kind's keys).
STATES_RUNTIME = "States.Runtime"
FAILURE_ERRORS = (STATES_RUNTIME, "States.ALL")  # one Catch each: States.ALL must be alone


@dataclass(frozen=True)
class Retrier:
    """One Retry rule of every Lambda task; the worst-case total wait is documented."""

    errors: tuple[str, ...]
    interval_s: int
    max_attempts: int
    backoff: float
    max_delay_s: int
    jitter: bool = True  # full jitter spreads W workers' retries; a timed wait keeps its span

    def worst_case_wait_s(self) -> float:
        return sum(min(self.interval_s * self.backoff ** k, self.max_delay_s)
                   for k in range(self.max_attempts))


# The Invoke call failed, so nothing ran (but see the 5xx below). Full jitter spreads the
# W workers' retries; waits are capped so a retried worker rejoins its waiting peers soon.
RETRIERS = (
    # Throttled (account or function concurrency): many patient attempts, at most ~6 min.
    Retrier((lambda_errors.THROTTLED,), interval_s=2, max_attempts=10, backoff=2.0,
            max_delay_s=60),
    # A VPC function's network interface is being (re)created: retry every 30-60 s.
    Retrier((lambda_errors.NOT_READY, lambda_errors.ENI_NOT_READY), interval_s=30,
            max_attempts=6, backoff=1.5, max_delay_s=60),
    # Lambda's transient 5xx (bp-lambda-serviceexception: 2 s, 6 attempts, backoff 2). The
    # function may have started anyway: a retried worker is then a duplicate, which its claim
    # stops (fasdl.run.fencing, WorkerDuplicate).
    Retrier(lambda_errors.TRANSIENT, interval_s=2, max_attempts=6, backoff=2.0,
            max_delay_s=30),
)
# The trigger's own "not yet" (fasdl/aws/account.py WorkerNotReady: the worker function is still
# Pending; fasdl/contract/cache.py CacheNotReady: FasdlCacheStack's cache is being created):
# every 30 s for up to 5 minutes, on the trigger's tasks only. Nothing ran, so a retry is safe.
NOT_READY_RETRIER = Retrier((WorkerNotReady.__name__, CacheNotReady.__name__), interval_s=30,
                            max_attempts=10, backoff=1.0, max_delay_s=30)
# A plan that waits for its cache's pre-scaled minimum (fasdl/aws/cache_lookup.py
# CacheWarming): asked again every 30 s for up to the longest wait a plan may hold.
CACHE_WARMING_RETRIER = Retrier((CacheWarming.__name__,), interval_s=CACHE_WAIT_POLL_S,
                                max_attempts=math.ceil(MAX_CACHE_WAIT_S / CACHE_WAIT_POLL_S),
                                backoff=1.0, max_delay_s=CACHE_WAIT_POLL_S, jitter=False)
TASK_TIMEOUT_SLACK_S = 60
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
STATE_MACHINE_ID = "StateMachine"
LOG_GROUP_ID = "ExecutionLogs"

# State names: read in the console and in local/ tests, so keep them stable.
INITIALIZE = "Initialize"
PLAN_RUN = "Plan run"
MORE_SEGMENTS = "More segments?"
TRAIN_SEGMENT = "Train segment"
PLAN_NEXT = "Plan next segment"
REPLAN = "Re-plan segment"  # an adaptive plan's only (infra/replan.py)
REPLAN_START = "Re-plan resumed segment"  # a resumed run's first: a fresh run passes through
SHORTEN = "Shorten segment"
RETRY = "Retry segment"
COUNT = "Count segment"
CONTINUE = "Continue as new"
CONTINUED = "Continued in new execution"
FINALIZE = "Finalize run"
SUCCEEDED = "Run succeeded"
RECORD_FAILURE = "Record failure"
FAILED = "Run failed"
RUN_EXISTS = "Run exists"


def add_lambda_retries(task: tasks.LambdaInvoke, *, trigger: bool = False) -> None:
    """The Retry rules of :data:`RETRIERS`, in order, with full jitter; ``trigger`` adds
    :data:`NOT_READY_RETRIER` and :data:`CACHE_WARMING_RETRIER` first."""
    first = (NOT_READY_RETRIER, CACHE_WARMING_RETRIER) if trigger else ()
    for retrier in (*first, *RETRIERS):
        task.add_retry(errors=list(retrier.errors),
                       interval=Duration.seconds(retrier.interval_s),
                       max_attempts=retrier.max_attempts, backoff_rate=retrier.backoff,
                       max_delay=Duration.seconds(retrier.max_delay_s),
                       jitter_strategy=(sfn.JitterType.FULL if retrier.jitter
                                        else sfn.JitterType.NONE))


def is_distributed(workers: int, inline_max: int = INLINE_MAP_LIMIT) -> bool:
    return workers > inline_max


def segments_per_execution(workers: int, inline_max: int = INLINE_MAP_LIMIT) -> int:
    """Segments one execution may run before it continues as new (history-limit guard)."""
    per_worker = (0 if is_distributed(workers, inline_max)
                  else EVENTS_PER_WORKER_INLINE * workers)
    return max(1, HISTORY_BUDGET // (EVENTS_PER_SEGMENT_FIXED + per_worker))


def state_machine_name(stack_name: str) -> str:
    # A fixed name lets "Continue as new" reference this machine without a template cycle.
    return f"{stack_name}-training"


class TrainingWorkflow(Construct):
    """Segments of W concurrent workers, looped by a Choice, finished by finalize."""

    def __init__(self, scope: Construct, construct_id: str, *, workers: int, timeout_s: int,
                 trigger: lambda_.IFunction, worker: lambda_.IFunction,
                 finalize: lambda_.IFunction, memory_mb: int,
                 inline_map_max_workers: int = INLINE_MAP_LIMIT,
                 replan: lambda_.IFunction | None = None) -> None:
        super().__init__(scope, construct_id)
        self._workers = workers
        self._distributed = is_distributed(workers, inline_map_max_workers)
        self._memory_mb = memory_mb
        self._timeout_s = timeout_s
        self._trigger = trigger
        self._worker = worker
        self._finalize = finalize
        self._replan = replan
        self.name = state_machine_name(Stack.of(self).stack_name)
        self.segment_limit = segments_per_execution(workers, inline_map_max_workers)
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
        add_lambda_retries(task, trigger=function is self._trigger)
        return task

    def _record(self, state_name: str) -> tasks.LambdaInvoke:
        """Finalize's ``failed`` action: failure.json (and, after a guard stop, the resume)."""
        return self._invoke(state_name, self._finalize, {
            "action": "failed", "state.$": "$", "execution.$": "$$.Execution.Id",
            "execution_started.$": "$$.Execution.StartTime",
        }, result_path=sfn.JsonPath.DISCARD)

    def _build_record_failure(self) -> tuple[sfn.IChainable, sfn.IChainable]:
        """``Record failure -> Run failed`` and the guards' ``Record stop -> ...``."""
        record = self._record(RECORD_FAILURE)
        failed = sfn.Fail(self, FAILED, state_name=FAILED, error=RUN_FAILED_ERROR,
                          cause="Training failed: see the execution history and "
                                "runs/<run_id>/failure.json in the results bucket")
        for error in FAILURE_ERRORS:
            record.add_catch(failed, errors=[error], result_path="$.record_error")
        stop = guard_states.guard_stop(self, record=self._record, failed=failed,
                                       failure_errors=FAILURE_ERRORS)
        return record.next(failed), stop

    def _build_run_worker(self, *, distributed: bool) -> tasks.LambdaInvoke:
        # The inline iteration outputs only its worker index, the Distributed child a small
        # status: W results stay a few KB whatever the worker returns (256 KiB Map limit).
        payload: dict[str, object] = {"action": events.TRAIN_ACTION,
                                      **{f"{name}.$": f"$.{name}"
                                         for name in events.WORKER_EVENT_FIELDS}}
        return self._invoke(RUN_WORKER, self._worker, payload, result_path=sfn.JsonPath.DISCARD,
                            output_path=None if distributed else "$.worker",
                            task_timeout_s=self._timeout_s + TASK_TIMEOUT_SLACK_S)

    def _build_train_segment(self) -> sfn.Map | sfn.DistributedMap:
        # the worker event's fields from the run state (cache: the Valkey endpoint the trigger
        # found, null for S3), the worker index from the Map item
        selector = {f"{name}.$": "$$.Map.Item.Value" if name == "worker" else f"$.run.{name}"
                    for name in events.WORKER_EVENT_FIELDS}
        if self._distributed:
            distributed = sfn.DistributedMap(
                self, TRAIN_SEGMENT, state_name=TRAIN_SEGMENT, items_path="$.run.workers",
                item_selector=selector, max_concurrency=self._workers,
                map_execution_type=sfn.StateMachineType.STANDARD,  # workers outlive Express
                result_path=OUTCOME_PATH)
            return distributed.item_processor(
                distributed_processor(self, self._build_run_worker(distributed=True)))
        inline = sfn.Map(self, TRAIN_SEGMENT, state_name=TRAIN_SEGMENT,
                         items_path="$.run.workers", item_selector=selector,
                         max_concurrency=self._workers, result_path=sfn.JsonPath.DISCARD)
        return inline.item_processor(inline_processor(
            self, self._build_run_worker(distributed=False), self._memory_mb))

    def _build_continue(self) -> tasks.StepFunctionsStartExecution:
        # Imported by name: referencing the machine being defined would be a template cycle.
        own = sfn.StateMachine.from_state_machine_name(self, "Self", self.name)
        return tasks.StepFunctionsStartExecution(
            self, CONTINUE, state_name=CONTINUE, state_machine=own,
            input=sfn.TaskInput.from_object({"resume.$": "$.run"}),
            associate_with_parent=True, result_path=sfn.JsonPath.DISCARD)

    # ---- definition ----------------------------------------------------------------------
    def _build_definition(self) -> sfn.IChainable:
        record_failure, guard_stop = self._build_record_failure()
        initialize = sfn.Pass(self, INITIALIZE, state_name=INITIALIZE, parameters={
            "input.$": "$", "count": {"segments": 0}})
        plan_run = self._invoke(PLAN_RUN, self._trigger, {
            "action": "start", "input.$": "$.input", "execution.$": "$$.Execution.Name",
            "execution_started.$": "$$.Execution.StartTime",
        }, result_path="$.run")
        train = self._build_train_segment()
        plan_next = self._invoke(PLAN_NEXT, self._trigger, {
            "action": "next", "run.$": "$.run"}, result_path="$.run")
        guard_states.catch_guards(plan_next, guard_stop)  # before the catch-all below
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

        self._catch_run_exists(plan_run)
        # an adaptive run re-plans once a segment is issued, before it trains: after "Plan
        # next segment", and after "Plan run" for a resumed (or continued) run
        replans = [self._invoke(name, self._replan, {"run.$": "$.run"}, result_path="$.run")
                   for name in (REPLAN, REPLAN_START)] if self._replan is not None else []
        catching: list[sfn.TaskStateBase | sfn.Map | sfn.DistributedMap] = [
            plan_run, train, plan_next, shorten, retry, finalize, continue_as_new, *replans,
            *self._wire_outcome(train, ok=plan_next, shorten=shorten, retry=retry,
                                fail=record_failure)]
        for state in catching:
            for error in FAILURE_ERRORS:
                state.add_catch(record_failure, errors=[error], result_path="$.error")

        more = sfn.Choice(self, MORE_SEGMENTS, state_name=MORE_SEGMENTS)
        more.when(sfn.Condition.boolean_equals("$.run.done", True), finalize.next(succeeded))
        more.when(sfn.Condition.number_greater_than_equals("$.count.segments",
                                                           self.segment_limit),
                  continue_as_new.next(continued))
        more.otherwise(train)
        issued_next, issued_start = sfn.Chain.start(plan_next), sfn.Chain.start(plan_run)
        if replans:  # each issuing state hands its run state to its re-plan
            issued_next, issued_start = (plan_next.next(replans[0]), plan_run.next(replans[1]))
        issued_next.next(count)
        shorten.next(count)
        retry.next(count)
        count.next(more)
        return initialize.next(issued_start).next(more)

    def _catch_run_exists(self, plan_run: tasks.LambdaInvoke) -> None:
        """Another execution owns the run id: fail with the trigger's message and never reach
        finalize, whose cleanup and failure.json would be the owner's run's (issue 41).
        Before the catch-all: the first matching Catch wins (concepts-error-handling.html)."""
        plan_run.add_catch(sfn.Fail(self, RUN_EXISTS, state_name=RUN_EXISTS,
                                    error=RunExists.__name__,
                                    cause_path=sfn.JsonPath.string_at("$.error.Cause")),
                           errors=[RunExists.__name__], result_path="$.error")

    def _wire_outcome(self, train: sfn.Map | sfn.DistributedMap, *, ok: sfn.IChainable,
                      shorten: sfn.IChainable, retry: sfn.IChainable,
                      fail: sfn.IChainable) -> list[tasks.LambdaInvoke]:
        """The segment's outcome: a distributed Map's results summarized by the trigger (its
        task returned, to be caught like the others); an inline Map's errors caught."""
        if self._distributed:
            summarize = self._invoke(SUMMARIZE_SEGMENT, self._trigger, summary_payload(),
                                     result_path=OUTCOME_PATH)
            train.next(summarize).next(outcome_choice(
                self, memory_mb=self._memory_mb, ok=ok,
                actions={"shorten": shorten, "retry": retry, "fail": fail}))
            return [summarize]
        for kind, action in ((TIMED_OUT, shorten), (CRASHED, retry)):
            train.add_catch(action, errors=[kind.error, *kind.caught], result_path="$.error")
        train.next(ok)
        return []

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
