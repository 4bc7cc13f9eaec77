"""What each Lambda receives from and returns to the state machine (infra/workflow.py): the
event contract, once. Stdlib only.

The handlers (functions/handlers/*) parse with these types (fasdl.run.run_state returns RunState,
fasdl.contract.worker_event parses a WorkerPayload into its WorkerEvent, field by field); the
state machine only reads the fields named here; everything else in a return value is ignored or
discarded.
Payloads stay small (a state's input/output must stay below 256 KiB): keys, never tensors.

State of one execution (``$``)::

    {"input": <execution input>, "count": {"segments": int},
     "run": RunState, "error": {"Error": str, "Cause": str}?, "result": FinalizeResult?}

Trigger (``handlers.trigger``), four run actions, each returns a complete :class:`RunState`,
and ``outcome``:

* ``start``   ``{"action": "start", "input": ExecutionInput, "execution": <execution name>,
  "execution_started": <its ISO 8601 start time>}`` (a name is reused after 90 days, the
  pair is one execution)
  Without ``input.resume``: apply the overrides to the deployed plan (env ``FASDL_PLAN``) or to
  ``input.plan`` (its deployment must equal env ``FASDL_DEPLOYMENT``), validate, write it to
  ``runs/<run_id>/plan.json`` in the results bucket and return segment 0. With
  ``input.resume``: return that run state under a new epoch (continue-as-new). Ignore unknown
  keys such as ``AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID``. Every action below returns a
  new ``segment.epoch`` too, recorded in ``runs/<run_id>/fence.json`` before it returns.
* ``next``    ``{"action": "next", "run": RunState}`` after every worker finished the segment:
  the following segment with ``attempt`` 0, or ``done: true`` after the last one. Raises
  ``DeadlineExceeded`` / ``BudgetExceeded`` (fasdl.contract.limits) instead when the next
  segment would pass the plan's (or the input's) limits: the run ends in that status.
* ``shorten`` ``{"action": "shorten", "run": RunState, "error": {"Error", "Cause"}}`` after a
  worker timed out: the same segment (same ``index``/``start_iteration``) with fewer
  ``iterations`` and ``attempt + 1``. Raise (any error) when no retry is left: the run then
  takes the failure path.
* ``retry``   ``{"action": "retry", "run": RunState, "error": {"Error", "Cause"}}`` after a
  worker crashed (``Runtime.ExitError``), a peer gave up waiting (``ChannelTimeout``,
  ``ChannelError``) or a worker was fenced or started twice (``WorkerFenced``,
  ``WorkerDuplicate``): the same segment, same ``iterations``, ``attempt + 1`` and
  ``segment.retries + 1``. Raise when the retries (``fasdl.run.run_state.MAX_RETRIES``) or attempts
  are used up.

* ``outcome`` ``{"action": "outcome", "results": [{"worker", "status", "error"}, ...],
  "statuses": [str, ...]}`` after a Distributed Map: returns :class:`SegmentOutcome`, for
  every listed status whether a child ended so and which workers (fasdl.run.segment_outcome);
  no run state, no epoch, no AWS call.

Every run action (all but ``outcome``) also sets ``run.cache``: null for S3 plans; for Valkey
plans the endpoint of the serverless cache named by env ``FASDL_CACHE_NAME``, looked up then
(``fasdl.contract.cache``: the cache lives in ``FasdlCacheStack`` and may have been replaced
between runs). It raises ``CacheMissing`` (no such cache: the run fails, saying how to deploy
it) or ``CacheNotReady`` (being created: retried).

Worker (``handlers.worker``), once per worker per segment (a Map item)::

    {"action": "train", "run_id": str, "plan_key": str, "segment": Segment, "worker": int,
     "cache": CacheEndpoint | null}

resume from the checkpoint at ``segment.start_iteration``, train ``segment.iterations``
iterations and write the segment's checkpoint. The return value is discarded (return a small
JSON object; the Map keeps only the worker index). A timeout (``Sandbox.Timedout``/
``States.Timeout``/``SegmentTooLong``) triggers ``shorten``; a crash (``Runtime.ExitError``,
``ChannelTimeout``, ``ChannelError``) triggers ``retry``; any other error fails the run.
A worker waits for a missing peer's shard at most ``FASDL_PEER_WAIT_START_S`` (first
iteration of an invocation, covers staggered cold starts; default 120) or
``max(FASDL_PEER_WAIT_MIN_S, FASDL_PEER_WAIT_FACTOR x slowest recent iteration)`` (default
10 s, 5x), never past its time left: then it raises ``ChannelTimeout``.

Metrics: workers print CloudWatch EMF records in namespace env ``FASDL_METRICS_NAMESPACE``
(``FasDL``) with the single dimension ``Stack`` = env ``FASDL_STACK``; metric names
``IterationTime ComputeTime UploadTime AggregateTime DownloadTime IdleTime`` (unit Seconds)
and ``Loss`` (unit None), which the dashboard (infra/monitoring.py) reads, and ``CpuTime``
(Seconds: the worker process's CPU over the iteration, all threads; against IterationTime it
shows the share of M/1769 vCPU used).

Environment of every function: ``FASDL_STACK FASDL_CHANNEL FASDL_DEPLOYMENT
FASDL_DATASETS_BUCKET FASDL_RESULTS_BUCKET FASDL_EXCHANGE_BUCKET FASDL_EXCHANGE_PREFIX
(exchange/) FASDL_RUNS_PREFIX (runs/) FASDL_PROFILES_PREFIX (profiles/)
FASDL_METRICS_NAMESPACE``; Valkey plans add ``FASDL_CACHE_NAME FASDL_CACHE_TLS=1`` (the
address comes in the run state); ``FASDL_TORCH_LAYER_STUB=1`` when synthesized with the
stand-in layer; the trigger alone gets ``FASDL_PLAN`` (the deployed plan as compact JSON) and
``FASDL_WORKER_FUNCTION`` (the worker's name, for the run-start checks of fasdl/aws/account.py).

Finalize (``handlers.finalize``), two actions:

* ``succeeded`` ``{"action": "succeeded", "run": RunState, "execution": <execution ARN>}``;
  its return value (:class:`FinalizeResult`) is the execution's output.
* ``failed``    ``{"action": "failed", "state": <the whole state $, run may be absent>,
  "execution": <execution ARN>, "execution_started": <its start time>}``: record
  ``state.error`` (``runs/<run_id>/failure.json``)
  and delete ``exchange/<run_id>/`` in the exchange bucket; the return value is discarded.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from fasdl.contract.cache import CacheEndpoint  # {"address": str, "port": int}


class Segment(TypedDict):
    index: int  # 0-based segment number within the run
    start_iteration: int  # first global iteration; the checkpoint to resume from
    iterations: int  # iterations in this segment (>= 1 unless the run is done)
    attempt: int  # 0, then +1 per shortened or plain retry of the segment
    epoch: int  # run-wide, strictly increasing, new for every state the trigger returns:
    # namespaces exchange keys and checkpoints, fences older attempts (fasdl.run.fencing)
    resume_epoch: int  # the epoch whose checkpoint at start_iteration this restores (0: none)
    retries: NotRequired[int]  # same-length reruns after a crash (trigger "retry")


class RunState(TypedDict):
    run_id: str
    plan_key: str  # results-bucket key of the run's frozen plan, runs/<run_id>/plan.json
    segment: Segment
    workers: list[int]  # [0, 1, ..., W-1]: the Map's items
    done: bool  # True: no segment left, go to Finalize
    cache: NotRequired[CacheEndpoint | None]  # set by every trigger action; null for S3
    # measured so far (fasdl.run.usage: started_at, worker/trigger GB-s and requests), kept
    # across "Continue as new"; every trigger action adds its own invocation
    usage: NotRequired[dict[str, float]]
    limits: NotRequired[dict[str, float]]  # the input's limits of a resumed run
    # an adaptive run's changes (planner/adapt/run_step.py): since, pending, changes and, after
    # a change, where the run stood then (fasdl.run.guards.SINCE_FIELDS)
    adaptive: NotRequired[dict[str, Any]]
    # the most workers the account's concurrency held when the run started (2 executions each,
    # fasdl.aws.account): a re-plan keeps within it as well as within the stack's ceiling
    workers_cap: NotRequired[int]


class ExecutionInput(TypedDict, total=False):
    run_id: str
    epochs: int
    dataset: str
    plan: dict[str, Any]
    resume: RunState  # set by "Continue as new", or to resume a run a guard stopped
    limits: dict[str, float]  # deadline_s / budget_usd instead of the plan's (also with resume)
    adaptive: str  # off | deadline | cost instead of the plan's (the last two: an adaptive stack)


class WorkerPayload(TypedDict):
    """The worker's event as the Map sends it; fasdl.contract.worker_event.WorkerEvent is its
    parsed, checked form."""

    action: str  # "train"
    run_id: str
    plan_key: str
    segment: Segment
    worker: int
    cache: CacheEndpoint | None


# What a worker event carries besides its action, in the order the state machine passes it:
# each from the run state of the same name, except ``worker`` (the Map item). infra builds
# the Map's item selector and the worker task's payload from this tuple.
WORKER_EVENT_FIELDS = tuple(name for name in WorkerPayload.__annotations__ if name != "action")
TRAIN_ACTION = "train"


class FinalizeResult(TypedDict):
    run_id: str
    model_key: str
    summary_key: str
    extra: NotRequired[dict[str, Any]]


# A Distributed Map child's status when its worker finished (infra/segment_states.py); the
# others are the failure kinds' statuses, which the state machine lists in the event.
OUTCOME_ACTION = "outcome"
OK_STATUS = "ok"


class SegmentOutcome(TypedDict):
    occurred: dict[str, bool]  # status -> some worker ended with it
    workers: dict[str, list[int]]  # status -> those workers, sorted
