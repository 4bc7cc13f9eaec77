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

Every run action issues a new ``segment.epoch`` (fasdl.run.fencing); ``shorten`` and
``retry`` also delete the failed epoch's S3 exchange keys. The actions themselves live in
fasdl.run.segment_actions: this module only parses the event, routes and returns.
Every action sets ``run.cache`` (fasdl.contract.cache): the Valkey endpoint, or null, and adds
its own duration and memory to ``run.usage`` (fasdl.run.usage: the run's measured figures).
``cache`` (the profiling state machine) returns just ``{"cache": endpoint or null}``;
``outcome`` the statuses of a Distributed Map's children (fasdl.run.segment_outcome).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fasdl.aws.metrics import get_logger
from fasdl.contract import events
from fasdl.contract.settings import Settings
from fasdl.exchange import stores
from fasdl.run import run_state, segment_actions, segment_outcome

logger = get_logger("fasdl-trigger")
RUN_ACTIONS = ("start", "next", "shorten", "retry")


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> Mapping[str, object]:
    began = time.monotonic()
    settings = Settings.from_env()
    action = event.get("action")
    logger.info("trigger", extra={"action": action})
    if action == events.OUTCOME_ACTION:  # after a Distributed Map: no run state, no AWS call
        return segment_outcome.summarize(event)
    if action == "cache":  # the profiling state machine: where the Valkey cache is, or null
        return {"cache": segment_actions.exchange_cache_of(settings)}
    if action not in RUN_ACTIONS:  # before any client is made
        raise run_state.RunStateError(f"event field 'action': must be start, next, shorten or "
                                     f"retry, got {action!r}")
    s3 = stores.s3_client(settings)
    store = stores.results_store(settings, s3)
    issue_epoch = segment_actions.epoch_issuer(store)
    if action == "start":
        run = segment_actions.start_run(event, settings, s3, issue_epoch, context)
    else:
        current = run_state.parse_run(event.get("run"))
        if action == "next":
            run = segment_actions.next_segment(settings, s3, store, current, issue_epoch)
        elif action == "shorten":
            run = segment_actions.shorten_segment(settings, s3, current, event.get("error"),
                                                  issue_epoch)
        else:
            run = segment_actions.retry_segment(settings, s3, current, event.get("error"),
                                                issue_epoch)
    run = segment_actions.with_cache_and_usage(run, settings, began=began, context=context)
    logger.info("run state", extra={"run": run})
    return run
