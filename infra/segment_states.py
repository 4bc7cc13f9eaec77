"""How a segment's worker failures are named and decided: one table for both kinds of Map.

Each way a worker can fail is a :class:`FailureKind`: the errors ``Run worker`` catches, the
state that names it, and what the segment does next (``shorten``, ``retry`` or ``fail``).

* **Inline Map** (W up to ``inline_map_max_workers``): the kind's state is a ``Fail`` whose
  segment-level error the ``Train segment`` Map catches. The first failed worker stops the
  Map, so its peers stop waiting at once.
* **Distributed Map**: a failed child would surface only as
  ``States.ExceedToleratedFailureThreshold``, which hides the kind. So children never fail:
  the kind's state is a ``Pass`` returning ``{"worker", "status", "error"}`` (a finished worker
  returns status ``ok``). ``Summarize segment`` (the trigger's ``outcome`` action,
  fasdl.run.segment_outcome) tells which statuses occurred and which workers had each, and
  the ``Segment outcome?`` Choice takes the most serious one, in :data:`PRECEDENCE` order, to
  the same trigger action the inline Map's Catch reaches. AWS documents an intrinsic's
  arguments as plain paths, so no ``$[*]`` or filter inside one does this (only moto's
  interpreter ran those). A child's output is about 60 bytes, so even W = 1,000 stays far
  below the 256 KiB a Map's collected output (and the task's payload) may hold; the child's
  full Cause stays in its own execution (Map Run, console).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from fasdl.contract import events
from fasdl.contract.errors import WorkerDuplicate, WorkerFenced, same_size_advice
from infra import lambda_errors

# SegmentTooLong: a worker that sees it cannot finish the segment in time fails fast on its own.
TIMEOUT_ERRORS = [lambda_errors.TASK_TIMEOUT, lambda_errors.TIMEOUT, "SegmentTooLong"]
# A worker process died or a peer's shards never came: rerun the segment at the same length
# from its checkpoint (the trigger bounds these retries too).
# WorkerDuplicate: a retried Invoke had started the worker already; WorkerFenced: a worker
# found its epoch superseded (fasdl.run.fencing); FrameError: a torn or foreign frame in the store
# (fasdl.exchange.wire). Each time a new epoch reruns the segment on fresh keys (bounded).
CRASH_ERRORS = [lambda_errors.EXIT, "ChannelTimeout", "ChannelError", WorkerDuplicate.__name__,
                WorkerFenced.__name__, "FrameError"]
SEGMENT_TIMEOUT_ERROR = "FasDL.SegmentTimeout"
WORKER_CRASHED_ERROR = "FasDL.WorkerCrashed"
# Out of memory: the same segment at the same M would die again, so the run fails at once.
OUT_OF_MEMORY_ERROR = "FasDL.WorkerOutOfMemory"
WORKER_FAILED_ERROR = "FasDL.WorkerFailed"

RUN_WORKER = "Run worker"
WORKER_FINISHED = "Worker finished"
WORKER_TIMED_OUT = "Worker timed out"
WORKER_CRASHED = "Worker crashed"
WORKER_OUT_OF_MEMORY = "Worker out of memory"
WORKER_FAILED = "Worker failed"
CLASSIFY_UNKNOWN = "Classify worker failure"
SUMMARIZE_SEGMENT = "Summarize segment"
SEGMENT_OUTCOME = "Segment outcome?"
OK_STATUS = events.OK_STATUS
INTRINSIC_RESERVED = set("'{}\\")
OUTCOME_PATH = "$.outcome"


@dataclass(frozen=True)
class FailureKind:
    """One way a worker fails, and what the segment does about it."""

    status: str  # the child's status (Distributed Map) and the ResultSelector flag
    state_name: str  # worker-level state: Fail (inline) or Pass (Distributed)
    segment_state_name: str  # Distributed only: the Pass that writes $.error for the action
    error: str  # segment-level error name
    caught: tuple[str, ...]  # errors of Run worker that mean this kind
    action: str  # shorten | retry | fail
    cause: str
    verb: str  # "Worker(s) 3 <verb>"


TIMED_OUT = FailureKind(
    "timed_out", WORKER_TIMED_OUT, "Segment timed out", SEGMENT_TIMEOUT_ERROR,
    tuple(TIMEOUT_ERRORS), "shorten",
    "A worker hit its timeout; the segment is retried shorter", "timed out")
CRASHED = FailureKind(
    "crashed", WORKER_CRASHED, "Segment crashed", WORKER_CRASHED_ERROR, tuple(CRASH_ERRORS),
    "retry", "A worker died or the shards of its peers never came; the segment is retried "
             "from its checkpoint", "crashed")
OUT_OF_MEMORY = FailureKind(
    "out_of_memory", WORKER_OUT_OF_MEMORY, "Segment out of memory", OUT_OF_MEMORY_ERROR,
    (lambda_errors.OUT_OF_MEMORY,), "fail", "A worker ran out of memory", "ran out of memory")
# Any other error (a bug, a bad dataset): the Distributed path fails the run with it, as the
# inline Map does by letting it through to the run's failure Catch.
FAILED = FailureKind(
    "failed", WORKER_FAILED, "Segment failed", WORKER_FAILED_ERROR, ("States.ALL",), "fail",
    "A worker failed with an error the workflow does not retry", "failed")
# Most serious first: a dead peer also makes its neighbours report ChannelTimeout (crash), so
# a timeout or out-of-memory is the cause to act on when both occur.
PRECEDENCE = (OUT_OF_MEMORY, FAILED, TIMED_OUT, CRASHED)
INLINE_KINDS = (TIMED_OUT, CRASHED)  # OUT_OF_MEMORY's Fail has its own cause; FAILED passes


def out_of_memory_advice(memory_mb: int) -> str:
    return (f"at the planned M = {memory_mb} MB ({lambda_errors.OUT_OF_MEMORY}; its peak is "
            f"the Max Memory Used of its last REPORT log line). "
            f"{same_size_advice(memory_mb)}")


def _catch_unknown(scope: Construct, run: tasks.LambdaInvoke,
                   targets: Mapping[str, sfn.IChainable]) -> None:
    """The optimized integration reports timeouts, OOM and crashes as Lambda.Unknown: tell
    them apart by the Cause."""
    classify = sfn.Choice(scope, CLASSIFY_UNKNOWN, state_name=CLASSIFY_UNKNOWN)
    classify.when(sfn.Condition.string_matches("$.failure.Cause", lambda_errors.TIMEOUT_CAUSE),
                  targets[TIMED_OUT.status])
    classify.when(sfn.Condition.string_matches("$.failure.Cause",
                                               lambda_errors.OUT_OF_MEMORY_CAUSE),
                  targets[OUT_OF_MEMORY.status])
    classify.otherwise(targets[CRASHED.status])
    run.add_catch(classify, errors=[lambda_errors.UNKNOWN], result_path="$.failure")


def inline_processor(scope: Construct, run: tasks.LambdaInvoke,
                     memory_mb: int) -> sfn.IChainable:
    """Run worker with a Fail per kind: the first failed worker fails the inline Map."""
    targets: dict[str, sfn.IChainable] = {
        kind.status: sfn.Fail(scope, kind.state_name, state_name=kind.state_name,
                              error=kind.error, cause=kind.cause)
        for kind in INLINE_KINDS}
    targets[OUT_OF_MEMORY.status] = sfn.Fail(
        scope, WORKER_OUT_OF_MEMORY, state_name=WORKER_OUT_OF_MEMORY, error=OUT_OF_MEMORY_ERROR,
        cause_path=sfn.JsonPath.format(
            f"Worker {{}} ran out of memory {out_of_memory_advice(memory_mb)} "
            "Lambda said: {}",
            sfn.JsonPath.string_at("$.worker"), sfn.JsonPath.string_at("$.failure.Cause")))
    for kind in INLINE_KINDS:
        run.add_catch(targets[kind.status], errors=list(kind.caught))
    run.add_catch(targets[OUT_OF_MEMORY.status], errors=list(OUT_OF_MEMORY.caught),
                  result_path="$.failure")
    _catch_unknown(scope, run, targets)
    return run


def distributed_processor(scope: Construct, run: tasks.LambdaInvoke) -> sfn.IChainable:
    """Run worker whose every outcome is a result ``{worker, status, error}``, never a fail."""
    def outcome(state_name: str, status: str, error: str) -> sfn.Pass:
        return sfn.Pass(scope, state_name, state_name=state_name, parameters={
            "worker.$": "$.worker", "status": status, **(
                {"error.$": error} if error.startswith("$") else {"error": error})})

    targets = {kind.status: outcome(kind.state_name, kind.status, "$.failure.Error")
               for kind in PRECEDENCE}
    for kind in (TIMED_OUT, CRASHED, OUT_OF_MEMORY):
        run.add_catch(targets[kind.status], errors=list(kind.caught), result_path="$.failure")
    _catch_unknown(scope, run, targets)
    run.add_catch(targets[FAILED.status], errors=list(FAILED.caught), result_path="$.failure")
    return run.next(outcome(WORKER_FINISHED, OK_STATUS, ""))


def summary_payload() -> dict[str, object]:
    """The trigger's ``outcome`` event: the children's results (the Map's output at
    :data:`OUTCOME_PATH`) and every kind's status, so each gets its flag and workers' list."""
    return {"action": events.OUTCOME_ACTION, "results.$": OUTCOME_PATH,
            "statuses": [kind.status for kind in PRECEDENCE]}


def _segment_error(scope: Construct, kind: FailureKind, memory_mb: int) -> sfn.Pass:
    """$.error as a Catch would have written it ({Error, Cause}), naming the workers."""
    workers = f"States.JsonToString({OUTCOME_PATH}.workers.{kind.status})"  # a plain path
    detail = (out_of_memory_advice(memory_mb) if kind is OUT_OF_MEMORY else
              f"({kind.cause}.) The error of each is in its child execution of the Map Run.")
    # Kept free of the characters an intrinsic string must escape: not every ASL
    # interpreter (moto's, here) parses the escapes.
    if set(detail) & INTRINSIC_RESERVED:
        raise ValueError(f"intrinsic text must not contain any of ' {{ }} \\: {detail!r}")
    return sfn.Pass(scope, kind.segment_state_name, state_name=kind.segment_state_name,
                    result_path="$.error", parameters={
                        "Error": kind.error,
                        "Cause.$": (f"States.Format('Worker(s) {{}} {kind.verb} {detail}', "
                                    f"{workers})")})


def outcome_choice(scope: Construct, *, memory_mb: int,
                   actions: Mapping[str, sfn.IChainable], ok: sfn.IChainable) -> sfn.Choice:
    """``Segment outcome?``: the most serious kind that occurred goes to its action (shorten,
    retry or fail) with ``$.error`` set; a segment where every worker finished goes on."""
    choice = sfn.Choice(scope, SEGMENT_OUTCOME, state_name=SEGMENT_OUTCOME)
    for kind in PRECEDENCE:
        flag = f"{OUTCOME_PATH}.occurred.{kind.status}"
        choice.when(sfn.Condition.boolean_equals(flag, True),
                    _segment_error(scope, kind, memory_mb).next(actions[kind.action]))
    return choice.otherwise(ok)
