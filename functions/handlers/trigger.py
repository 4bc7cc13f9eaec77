"""Trigger Lambda: plans the run and each segment (infra/contract.py, no torch needed).

* ``start``: ``{"input": ExecutionInput, "execution": name}`` → validates the plan (deployed
  ``FASDL_PLAN`` or ``input.plan``, against ``FASDL_DEPLOYMENT``), applies the ``epochs`` /
  ``dataset`` / ``run_id`` overrides, checks the dataset (HEAD of ``x.npy``/``y.npy``, .npy
  headers by ranged GET), writes ``runs/<run_id>/plan.json`` and ``partitions.json`` and
  returns the RunState of segment 0; with ``input.resume`` returns that state as is. Either
  way it then checks the account's concurrency for 2·W and waits for an Active worker function
  (fasdl/account.py): ConcurrencyQuotaTooLow, WorkerFunctionFailed or WorkerNotReady (retried).
* ``next``: the following segment (attempt 0) or ``done: true``.
* ``shorten``: the same segment, half the iterations, ``attempt + 1``; raises when no retry
  is left.
* ``retry``: the same segment, same iterations, ``attempt + 1`` (a worker crashed); raises
  RetriesExhausted after ``MAX_RETRIES``.
"""

from __future__ import annotations

from typing import Any

from fasdl import account, segments
from fasdl.environment import Settings
from fasdl.metrics import get_logger

logger = get_logger("fasdl-trigger")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    settings = Settings.from_env()
    action = event.get("action")
    logger.info("trigger", extra={"action": action})
    if action == "start":
        run = segments.start_run(
            event, settings.s3_client(), datasets_bucket=settings.datasets_bucket,
            results_bucket=settings.results_bucket, runs_prefix=settings.runs_prefix,
            deployed_json=settings.plan_json, fingerprint=settings.deployment)
        # Before any worker starts: 2·W concurrency and an Active worker (fasdl/account.py).
        ready = account.before_first_map(len(run["workers"]), context)
        logger.info("worker function ready", extra={"ready": ready})
    elif action == "next":
        current = segments.parse_run(event.get("run"))
        plan = segments.load_run_plan(settings.s3_client(), settings.results_bucket, current)
        run = segments.next_state(current, plan)
    elif action == "shorten":
        run = segments.shorten_state(segments.parse_run(event.get("run")), event.get("error"))
    elif action == "retry":
        run = segments.retry_state(segments.parse_run(event.get("run")), event.get("error"))
    else:
        raise segments.RunStateError(f"event field 'action': must be start, next, shorten or "
                                     f"retry, got {action!r}")
    logger.info("run state", extra={"run": run})
    return run
