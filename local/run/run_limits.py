"""A local run's deadline and budget (``python -m local run --budget-usd X --deadline-s S``) and
what its report says when a guard stopped it.

The options replace the plan's ``limits`` (fasdl.contract.limits) before the run starts; a
plan without limits gets them with the planner's Lambda prices of its region and arch, the
limit not given left at its maximum. The trigger's guard (fasdl.run.guards) then stops the
run between segments as on AWS; finalize's failure.json names the status, the checkpoint it
kept and the resume input (fasdl.run.run_record). The report records them, checks that the
checkpoint is really in the local S3, and prints how to resume: on AWS, the command as
given; locally the servers (and the checkpoint) are gone when the run ends.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fasdl.contract.limits import (
    GUARD_STATUSES,
    MAX_BUDGET_USD,
    MAX_DEADLINE_S,
    Limits,
)
from fasdl.contract.plan import Plan, PlanError
from local.run.report import _error_message  # a Lambda error's cause: its message only


def with_limits(plan: Plan, *, budget_usd: float | None, deadline_s: float | None) -> Plan:
    """``plan`` with the options' limits (PlanError names a bad one)."""
    if budget_usd is None and deadline_s is None:
        return plan
    limits = plan.limits or _priced_limits(plan)
    changes = {name: value for name, value in (("budget_usd", budget_usd),
                                                ("deadline_s", deadline_s))
               if value is not None}
    changed = dataclasses.replace(limits, **changes)
    changed.validate()
    return dataclasses.replace(plan, limits=changed)


def _priced_limits(plan: Plan) -> Limits:
    from planner.model.inputs.profiles import ProfileError, load_prices

    try:
        prices = load_prices(plan.deployment.region)
        per_gb_s = prices.lambda_mb_s(plan.deployment.arch) * 1024.0
    except ProfileError as error:
        raise PlanError("limits", f"the plan has none and no Lambda prices are shipped for "
                                  f"it: {error}") from error
    return Limits(deadline_s=MAX_DEADLINE_S, budget_usd=MAX_BUDGET_USD,
                  lambda_usd_per_gb_s=per_gb_s, lambda_usd_per_request=prices.lambda_request)


def stop_status(execution_error: object) -> str | None:
    """DEADLINE_EXCEEDED / BUDGET_EXCEEDED when the execution ended in a guard's Fail state."""
    return str(execution_error) if execution_error in GUARD_STATUSES.values() else None


def annotate_stop(report: dict[str, Any], client: Any, bucket: str) -> None:
    """``report["stop"]``: the guard's status, the checkpoint (and whether the local S3 holds
    it) and the resume command from failure.json; nothing for a run no guard stopped."""
    failure = report.get("failure")
    if not isinstance(failure, dict) or failure.get("status") not in GUARD_STATUSES.values():
        return
    key = str(failure.get("checkpoint_key"))
    try:
        client.head_object(Bucket=bucket, Key=key)
        kept = True
    except client.exceptions.ClientError:
        kept = False
    report["stop"] = {"status": failure["status"], "checkpoint_key": key,
                      "checkpoint_kept": kept, "resume": failure.get("resume"),
                      "reason": _error_message(failure.get("cause"))}


def format_stop(report: dict[str, Any]) -> str | None:
    stop = report.get("stop")
    if not isinstance(stop, dict):
        return None
    resume = stop.get("resume") or {}
    return "\n".join([
        f"  stopped: {stop['status']}: {stop['reason']}",
        f"  checkpoint kept: s3://<results bucket>/{stop['checkpoint_key']}"
        + ("" if stop["checkpoint_kept"] else " (NOT FOUND)"),
        f"  to resume on AWS (new limits: the whole run at the pace so far): "
        f"{resume.get('command')}",
        "  to resume here: a run started with --keep DIR continues with python -m local run "
        "--resume DIR [--budget-usd USD] [--deadline-s S] (without --keep its servers and "
        "checkpoint are gone once it ends)"])
