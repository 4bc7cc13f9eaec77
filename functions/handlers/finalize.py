"""Finalize Lambda (fasdl/contract/events.py).

* ``succeeded`` ``{"run": RunState, "execution": arn}``: copies the last checkpoint's merged
  model to ``runs/<run_id>/model.npy`` and worker 0's export objects to
  ``model.safetensors`` (the complete state dict) and ``model.json`` (fasdl.run.results), writes
  ``runs/<run_id>/summary.json`` from the workers' segment results and the run's measured
  figures beside the plan's predictions (fasdl.run.run_record), deletes the run's
  exchange keys and returns
  ``{run_id, model_key, summary_key, extra}``.
* ``failed`` ``{"state": $, "execution": arn}``: only for its own run (fasdl.run.run_claim
  ``foreign_failure``: the fence still at its run state's epoch; without a run state, no plan
  or a plan naming this execution), else it leaves everything alone and says why; writes
  ``runs/<run_id>/failure.json`` first
  (with the measured figures; for a run a deadline or budget guard stopped, its status, the
  kept checkpoint and the resume command), then deletes the exchange keys (best effort:
  Valkey keys also expire by TTL).

In Valkey plans finalize runs in the VPC (it reaches the cache and, through the gateway
endpoint, S3); the cache's endpoint is the run state's ``cache``.

Needs neither torch nor numpy: the model is copied verbatim after a sha256 check.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fasdl.aws.metrics import get_logger
from fasdl.contract.cache import parse_endpoint
from fasdl.contract.settings import Settings
from fasdl.exchange import stores
from fasdl.run import results, run_claim, run_record, run_state, usage

logger = get_logger("fasdl-finalize")


def _clean(settings: Settings, s3: Any, run_id: str, run: object) -> None:
    """Delete the run's exchange keys; a Valkey plan's run state names the cache (run.cache),
    which finalize reaches from inside the VPC, and its plan the S3 key prefixes. Without a
    run state no worker ran, so nothing is under a hashed prefix."""
    try:
        cache = run.get("cache") if isinstance(run, dict) else None
        settings = settings.with_cache(parse_endpoint(cache, "run.cache"))
        prefixes = (run_state.load_run_plan(s3, settings.results_bucket, run)
                    .training.exchange_key_prefixes
                    if isinstance(run, dict) and "plan_key" in run else 1)
        deleted = results.clean_exchange(settings, run_id, prefixes)
    except Exception:  # cleanup must not hide the outcome; the lifecycle rule / TTL remain
        logger.exception("exchange cleanup failed", extra={"run_id": run_id})
    else:
        logger.info("exchange cleaned", extra={"run_id": run_id, "deleted": deleted})


def _failure_extra(s3: Any, settings: Settings, state: dict[str, Any], execution: str,
                   began: float, context: LambdaContext) -> dict[str, Any]:
    """failure.json's measured figures and, after a guard stopped the run, how to resume it;
    never keeps the failure from being recorded."""
    extra: dict[str, Any] = {}
    run = state.get("run")
    try:
        if isinstance(run, dict):
            extra["measured"] = run_record.measured_figures(
                s3, settings, run, seconds=time.monotonic() - began,
                memory_mb=usage.memory_of(context))
        stop = run_record.guard_stop(s3, settings, state, execution)
    except Exception:
        logger.exception("measured figures of the failed run unavailable")
        return extra
    return {**extra, **(stop or {})}


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    began = time.monotonic()
    settings = Settings.from_env()
    action = event.get("action")
    execution = str(event.get("execution", ""))
    s3 = stores.s3_client(settings)
    if action == "succeeded":
        run = run_state.parse_run(event.get("run"))
        measured = run_record.measured_figures(s3, settings, run, memory_mb=usage.memory_of(
            context), seconds=time.monotonic() - began)
        outcome = results.write_final(s3, settings, run, execution, measured=measured)
        _clean(settings, s3, outcome["run_id"], run)
        logger.info("run finished", extra=outcome)
        return outcome
    if action == "failed":
        state = event.get("state")
        state = state if isinstance(state, dict) else {}
        run_id = results.failed_run_id(state, execution)
        foreign = run_claim.foreign_failure(stores.results_store(settings, s3), run_id, state,
                                            execution, str(event.get("execution_started", "")))
        if foreign is not None:  # issue 41: another execution's or a newer attempt's run
            logger.warning("failure not recorded", extra={"run_id": run_id, "why": foreign})
            return {"run_id": run_id, "failure_key": None, "not_recorded": foreign}
        extra = _failure_extra(s3, settings, state, execution, began, context)
        run_id, key = results.write_failure(s3, settings, state, execution, extra=extra)
        logger.error("run failed", extra={"run_id": run_id, "failure_key": key})
        _clean(settings, s3, run_id, state.get("run"))
        return {"run_id": run_id, "failure_key": key}
    raise run_state.RunStateError(f"event field 'action': must be succeeded or failed, "
                                 f"got {action!r}")
