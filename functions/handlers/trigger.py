"""Trigger Lambda: plans the run and each segment (fasdl/contract/events.py, no torch needed).

* ``start``: ``{"input": ExecutionInput, "execution": name}`` → validates the plan (deployed
  ``FASDL_PLAN`` or ``input.plan``, against ``FASDL_DEPLOYMENT``), applies the ``epochs`` /
  ``dataset`` / ``run_id`` overrides, checks the dataset (HEAD of ``x.npy``/``y.npy``, .npy
  headers by ranged GET), writes ``runs/<run_id>/plan.json`` and ``partitions.json`` and
  returns the RunState of segment 0; with ``input.resume`` returns that state, new epoch. Either
  way it then checks the account's concurrency for 2·W and waits for an Active worker function
  (fasdl/aws/account.py): ConcurrencyQuotaTooLow, WorkerFunctionFailed or WorkerNotReady (retried).
* ``next``: the following segment (attempt 0) or ``done: true``. Before it starts a segment it
  adds the finished segment's worker invocations to ``run.usage`` and checks the plan's
  limits (fasdl.run.guards): DeadlineExceeded or BudgetExceeded stop the run, checkpoint kept.
* ``shorten``: the same segment, half the iterations, ``attempt + 1``; raises when no retry
  is left.
* ``retry``: the same segment, same iterations, ``attempt + 1`` (a worker crashed); raises
  RetriesExhausted after ``MAX_RETRIES``, and WorkerOutOfMemory when a worker's REPORT line
  shows it used its whole memory (fasdl.aws.memory_report: a kill Lambda named a crash).

Every run action issues a new ``segment.epoch`` (fasdl.run.fencing: recorded in
``runs/<run_id>/fence.json`` first, which stops every older attempt's workers); ``shorten``
and ``retry`` also delete the failed epoch's S3 exchange keys.
Every action sets ``run.cache`` (fasdl.contract.cache): the Valkey endpoint, or null, and adds
its own duration and memory to ``run.usage`` (fasdl.run.usage: the run's measured figures).
``cache`` (the profiling state machine) returns just ``{"cache": endpoint or null}``;
``outcome`` the statuses of a Distributed Map's children (fasdl.run.segment_outcome).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fasdl.aws import account, cache_lookup, memory_report
from fasdl.aws.metrics import get_logger
from fasdl.contract import events, keys
from fasdl.contract.cache import CacheEndpoint
from fasdl.contract.events import RunState
from fasdl.contract.settings import WORKER_LOG_GROUP_ENV, Settings
from fasdl.exchange import stores
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.run import (
    fault_hooks,
    fencing,
    guards,
    results,
    retention,
    run_state,
    segment_outcome,
    usage,
)

logger = get_logger("fasdl-trigger")
ATTEMPT_SLACK_S = 120  # the Run worker task's slack (infra.workflow) and clock skew


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> Mapping[str, object]:
    began = time.monotonic()
    settings = Settings.from_env()
    action = event.get("action")
    logger.info("trigger", extra={"action": action})
    if action == events.OUTCOME_ACTION:  # after a Distributed Map: no run state, no AWS call
        return segment_outcome.summarize(event)
    if action == "cache":  # the profiling state machine: where the Valkey cache is, or null
        return {"cache": exchange_cache_of(settings)}
    s3 = stores.s3_client(settings)
    store = stores.results_store(settings, s3)

    def issue_epoch(run_id: str, *, supersedes: int | None, call: str) -> int:
        # fences every older attempt's workers; a late call issues nothing (fasdl.run.fencing)
        return fencing.issue_epoch(store, run_id, supersedes=supersedes, call=call,
                                   after_read=fault_hooks.fence_stall())

    if action == "start":
        run = run_state.start_run(
            event, s3, datasets_bucket=settings.datasets_bucket,
            results_bucket=settings.results_bucket, runs_prefix=settings.runs_prefix,
            deployed_json=settings.plan_json, fingerprint=settings.deployment,
            issue_epoch=issue_epoch)
        # Before any worker starts: 2·W concurrency and an Active worker (fasdl/aws/account.py).
        ready = account.before_first_map(len(run["workers"]), context)
        logger.info("worker function ready", extra={"ready": ready})
        # a fresh run starts its totals; a resumed one keeps them (its pause not counted)
        run["usage"] = usage.resume_clock(run, time.time()) or usage.new_usage(time.time())
    elif action == "next":
        run = _next_segment(settings, s3, store, run_state.parse_run(event.get("run")),
                            issue_epoch)
    elif action == "shorten":
        current = run_state.parse_run(event.get("run"))
        run = _again(run_state.shorten_state, current, event.get("error"), issue_epoch,
                     call=action)
        _clean_dead_epoch(settings, s3, current)
    elif action == "retry":
        current = run_state.parse_run(event.get("run"))
        _check_memory_of_failed_attempt(settings)
        run = _again(run_state.retry_state, current, event.get("error"), issue_epoch,
                     call=action)
        _clean_dead_epoch(settings, s3, current)
    else:
        raise run_state.RunStateError(f"event field 'action': must be start, next, shorten or "
                                     f"retry, got {action!r}")
    run["cache"] = exchange_cache_of(settings)
    measured = usage.usage_of(run)
    if measured is not None:
        run["usage"] = usage.with_trigger(measured, time.monotonic() - began,
                                          usage.memory_of(context))
    logger.info("run state", extra={"run": run})
    return run


def _again(step: Callable[..., RunState], current: RunState, error: object,
           issue_epoch: fencing.EpochIssuer, *, call: str) -> RunState:
    """``step`` (shorten or retry) once at the current epoch, so that RetriesExhausted is
    raised before an epoch is issued: a run that gives up leaves the fence at its run state's
    epoch, and finalize records its failure (fasdl.run.run_claim.foreign_failure)."""
    epoch = current["segment"]["epoch"]
    step(current, error, epoch=epoch)
    return step(current, error, epoch=issue_epoch(current["run_id"], supersedes=epoch,
                                                   call=call))


def _next_segment(settings: Settings, s3: Any, store: S3Channel, current: RunState,
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
                 following=0 if following["done"] else following["segment"]["iterations"])
    run = run_state.next_state(current, plan, epoch=issue_epoch(
        current["run_id"], supersedes=finished["epoch"], call="next"))
    if totals is not None:
        run["usage"] = totals
    _prune_checkpoints(store, current, settings.keep_checkpoints)
    return run


def exchange_cache_of(settings: Settings) -> CacheEndpoint | None:
    """Valkey plans: the cache's endpoint, looked up on every action (FasdlCacheStack may have
    been replaced since the last one); S3 plans: None."""
    if settings.channel != "valkey":
        return None
    if not settings.cache_name:  # a fixed address (tests): nothing to look up
        return {"address": settings.cache_endpoint, "port": settings.cache_port}
    import boto3

    return cache_lookup.locate(boto3.client("elasticache"), settings.cache_name,
                                 settings.stack)


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
    log_group = os.environ.get(WORKER_LOG_GROUP_ENV)
    if not log_group:  # in-process tests without a log group: nothing to read
        return
    import boto3

    timeout_s = float(run_state.parse_fingerprint(settings.deployment)["timeout_s"])
    memory_report.check_failed_attempt(
        boto3.client("logs"), log_group, now_ms=int(time.time() * 1000),
        window_s=timeout_s + ATTEMPT_SLACK_S)
