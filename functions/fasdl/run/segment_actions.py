"""The trigger's run actions (start, next, shorten, retry): what each does to the run state,
the fence, the usage totals and the S3 leftovers. handlers/trigger.py parses the event and
routes here, so the orchestration lives in the runtime's run room, not in a handler.

Every action issues a new ``segment.epoch`` (fasdl.run.fencing: recorded in
``runs/<run_id>/fence.json`` first, which stops every older attempt's workers); ``shorten``
and ``retry`` also delete the failed epoch's S3 exchange keys. Imports no torch, numpy or
redis: the trigger's bundle has none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from fasdl.aws import account, cache_lookup, memory_report, sessions
from fasdl.aws.metrics import get_logger
from fasdl.contract import keys
from fasdl.contract.cache import CacheEndpoint
from fasdl.contract.events import RunState
from fasdl.contract.lambda_quotas import EXECUTIONS_PER_WORKER
from fasdl.contract.settings import Settings
from fasdl.exchange import stores
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.run import fault_hooks, fencing, guards, results, retention, run_state, usage

# The handler's own service name: these lines are the trigger's, with its Lambda context keys.
logger = get_logger("fasdl-trigger")
ATTEMPT_SLACK_S = 120  # the Run worker task's slack (infra.workflow) and clock skew


def epoch_issuer(store: S3Channel) -> fencing.EpochIssuer:
    """Issues a run's epochs on ``store``: fences every older attempt's workers; a late call
    issues nothing (fasdl.run.fencing)."""

    def issue_epoch(run_id: str, *, supersedes: int | None, call: str) -> int:
        if (late := fault_hooks.late_call()) is not None:  # until its retry issued
            late(call, lambda: fencing.read_epoch(store, run_id) != supersedes)
        stall = fault_hooks.fence_stall()
        return fencing.issue_epoch(store, run_id, supersedes=supersedes, call=call,
                                   after_read=None if stall is None
                                   else lambda: stall(call, None))

    return issue_epoch


def start_run(event: Mapping[str, Any], settings: Settings, s3: Any,
              issue_epoch: fencing.EpochIssuer, context: Any) -> RunState:
    """Segment 0 (or a resumed run's state) once the worker function can take 2·W."""
    run = run_state.start_run(
        event, s3, datasets_bucket=settings.datasets_bucket,
        results_bucket=settings.results_bucket, runs_prefix=settings.runs_prefix,
        deployed_json=settings.plan_json, fingerprint=settings.deployment,
        issue_epoch=issue_epoch)
    # Before any worker starts: 2·W concurrency and an Active worker (fasdl/aws/account.py).
    ready = account.before_first_map(len(run["workers"]), context,
                                     settings.worker_function)
    logger.info("worker function ready", extra={"ready": ready})
    if ready is not None:  # what a re-plan may scale out to (contract.events RunState)
        run["workers_cap"] = int(ready["concurrency"]["available"]) // EXECUTIONS_PER_WORKER
    # a fresh run starts its totals; a resumed one keeps them (its pause not counted)
    now = time.time()
    run["usage"] = usage.resume_clock(run, now) or _new_run_usage(event, settings, s3, run,
                                                                  now)
    return run


def _new_run_usage(event: Mapping[str, Any], settings: Settings, s3: Any, run: RunState,
                   now: float) -> dict[str, float]:
    """A new run's totals. A plan that waits for its cache's pre-scaled minimum
    (``prediction.cache_wait_s``) waits here first (CacheWarming, retried by the state
    machine), and its clock starts at the execution's start: the deadline counts the wait."""
    if settings.channel != "valkey" or not settings.cache_name:
        return usage.new_usage(now)
    plan = run_state.load_run_plan(s3, settings.results_bucket, run)
    wait_s = plan.prediction.cache_wait_s if plan.prediction is not None else None
    if not wait_s:
        return usage.new_usage(now)
    ready_for = cache_lookup.seconds_until_prescaled(
        sessions.client("elasticache"), settings.cache_name, wait_s=wait_s, now=now,
        stack_name=settings.stack)
    started = min(now, _execution_start(event, now))
    logger.info("cache pre-scaled", extra={"cache_wait_s": wait_s, "ready_for_s": ready_for,
                                           "waited_s": now - started})
    return {**usage.new_usage(started), usage.CACHE_WAIT: round(now - started, 3)}


def _execution_start(event: Mapping[str, Any], default: float) -> float:
    """``$$.Execution.StartTime`` (ISO 8601) in seconds since the epoch; ``default`` when the
    event has none (in-process tests) or it does not parse."""
    text = event.get("execution_started")
    try:
        return datetime.fromisoformat(str(text)).timestamp() if text else default
    except ValueError:
        return default


def next_segment(settings: Settings, s3: Any, store: S3Channel, current: RunState,
                 issue_epoch: fencing.EpochIssuer) -> RunState:
    """The next segment once the finished one's worker invocations are in ``run.usage`` and
    the limits allow it (fasdl.run.guards raises before any epoch is issued)."""
    plan = run_state.load_run_plan(s3, settings.results_bucket, current)
    finished = current["segment"]
    totals = usage.usage_of(current)
    if totals is not None:
        attempts = results.segment_results(s3, settings, current["run_id"],
                                           index=finished["index"])
        totals = usage.with_workers(totals, (item for items in attempts.values()
                                             for item in items))
    following = run_state.next_state(current, plan, epoch=finished["epoch"])
    done = finished["start_iteration"] + finished["iterations"]
    guards.check(plan, guards.run_limits(plan, current), totals, now=time.time(), done=done,
                 following=0 if following["done"] else following["segment"]["iterations"],
                 since=guards.since_of(current))
    run = run_state.next_state(current, plan, epoch=issue_epoch(
        current["run_id"], supersedes=finished["epoch"], call="next"))
    if totals is not None:
        run["usage"] = totals
    _prune_checkpoints(store, current, settings.keep_checkpoints)
    return run


def shorten_segment(settings: Settings, s3: Any, current: RunState, error: object,
                    issue_epoch: fencing.EpochIssuer) -> RunState:
    """The same segment with half the iterations (it did not fit the timeout)."""
    run = _again(run_state.shorten_state, current, error, issue_epoch, call="shorten")
    _clean_dead_epoch(settings, s3, current)
    return run


def retry_segment(settings: Settings, s3: Any, current: RunState, error: object,
                  issue_epoch: fencing.EpochIssuer) -> RunState:
    """The same segment again (a crash, a peer timeout, a fenced or duplicate worker), unless
    the failed attempt ran out of memory (WorkerOutOfMemory)."""
    _check_memory_of_failed_attempt(settings)
    run = _again(run_state.retry_state, current, error, issue_epoch, call="retry")
    _clean_dead_epoch(settings, s3, current)
    return run


def with_cache_and_usage(run: RunState, settings: Settings, *, began: float,
                         context: Any) -> RunState:
    """Every action's tail: where the cache is now, and the trigger's own duration and memory
    added to ``run.usage``."""
    run["cache"] = exchange_cache_of(settings)
    measured = usage.usage_of(run)
    if measured is not None:
        run["usage"] = usage.with_trigger(measured, time.monotonic() - began,
                                          usage.memory_of(context))
    return run


def exchange_cache_of(settings: Settings) -> CacheEndpoint | None:
    """Valkey plans: the cache's endpoint, looked up on every action (FasdlCacheStack may have
    been replaced since the last one); S3 plans: None."""
    if settings.channel != "valkey":
        return None
    if not settings.cache_name:  # a fixed address (tests): nothing to look up
        return {"address": settings.cache_endpoint, "port": settings.cache_port}
    return cache_lookup.locate(sessions.client("elasticache"), settings.cache_name,
                                 settings.stack)


def _again(step: Callable[..., RunState], current: RunState, error: object,
           issue_epoch: fencing.EpochIssuer, *, call: str) -> RunState:
    """``step`` (shorten or retry) once at the current epoch, so that RetriesExhausted is
    raised before an epoch is issued: a run that gives up leaves the fence at its run state's
    epoch, and finalize records its failure (fasdl.run.run_claim.foreign_failure)."""
    epoch = current["segment"]["epoch"]
    step(current, error, epoch=epoch)
    return step(current, error, epoch=issue_epoch(current["run_id"], supersedes=epoch,
                                                   call=call))


def _clean_dead_epoch(settings: Settings, s3: Any, dead: RunState) -> None:
    """Delete what the failed attempt left on the S3 exchange, once it is fenced (bounded:
    one listing of its epoch's prefix under each of the plan's hashed key prefixes). Valkey
    keys expire by TTL instead: the trigger is outside the VPC. Nothing depends on it: a
    later epoch never reads these keys."""
    if settings.channel != "s3":
        return
    prefix = keys.exchange_prefix(dead["run_id"], dead["segment"]["epoch"])
    try:
        plan = run_state.load_run_plan(s3, settings.results_bucket, dead)
        channel = stores.exchange_channel(settings, plan.training.exchange_key_prefixes)
        try:
            deleted = channel.delete_prefix(prefix)
        finally:
            channel.close()
    except Exception:  # cleanup must not fail the retry; the bucket's lifecycle rule remains
        logger.exception("dead epoch cleanup failed", extra={"prefix": prefix})
    else:
        logger.info("dead epoch cleaned", extra={"prefix": prefix, "deleted": deleted})


def _prune_checkpoints(store: S3Channel, finished: RunState, keep: int) -> None:
    """Once a segment has committed its checkpoint: keep the newest ``keep`` of the chain and
    delete dead attempts' objects (fasdl.run.retention). Never fails the run: what is left
    only costs storage."""
    segment = finished["segment"]
    iteration = segment["start_iteration"] + segment["iterations"]
    try:
        deleted = retention.prune_checkpoints(store, finished["run_id"], iteration,
                                              segment["epoch"], keep)
    except Exception:
        logger.exception("checkpoint retention failed", extra={"run_id": finished["run_id"]})
    else:
        logger.info("checkpoints pruned", extra={"run_id": finished["run_id"],
                                                 "deleted": deleted, "kept": keep})


def _check_memory_of_failed_attempt(settings: Settings) -> None:
    """A crash may be an out-of-memory kill Lambda reported as Runtime.ExitError: read the
    workers' REPORT lines (fasdl.aws.memory_report) and fail now rather than die again."""
    log_group = settings.worker_log_group
    if not log_group:  # in-process tests without a log group: nothing to read
        return
    timeout_s = float(run_state.parse_fingerprint(settings.deployment)["timeout_s"])
    memory_report.check_failed_attempt(
        sessions.client("logs"), log_group, now_ms=int(time.time() * 1000),
        window_s=timeout_s + ATTEMPT_SLACK_S)
