"""What finalize adds to a run's records: the measured figures beside the plan's predictions
(``summary.json``, also ``failure.json``), and for a run a guard stopped
(fasdl.run.guards) its status, the kept checkpoint and how to resume it.

Resuming is an execution of the same state machine with ``{"resume": <the next segment's run
state>, "limits": {...}}`` (fasdl.contract.events ExecutionInput); the suggested limits are
the whole run projected at the pace so far (fasdl.run.guards.raised_limits). Stdlib only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from fasdl.contract.keys import manifest_key
from fasdl.contract.limits import GUARD_STATUSES
from fasdl.contract.settings import Settings
from fasdl.run import guards, results, run_state, usage


def current_totals(s3: Any, settings: Settings, run: Mapping[str, Any]
                   ) -> dict[str, float] | None:
    """``run.usage`` plus the worker invocations of ``run.segment`` (every attempt), which the
    trigger adds only once it moves past the segment: a failed or stopped run's last segment,
    nothing for a finished run (its ``done`` state names a segment no worker ran)."""
    totals = usage.usage_of(run)
    if totals is None:
        return None
    index = int(run["segment"]["index"])
    attempts = results.segment_results(s3, settings, str(run["run_id"]), index=index)
    return usage.with_workers(totals, (item for items in attempts.values() for item in items))


def measured_figures(s3: Any, settings: Settings, run: Mapping[str, Any], *, seconds: float,
                     memory_mb: int) -> dict[str, Any] | None:
    """The run's totals (:func:`current_totals`) with this finalize invocation (``seconds``
    so far at ``memory_mb``) added, priced and set beside the plan's predictions; None for a
    run state without usage (written before runs measured)."""
    totals = current_totals(s3, settings, run)
    if totals is None:
        return None
    plan = run_state.load_run_plan(s3, settings.results_bucket, run)
    totals = usage.with_trigger(totals, seconds, memory_mb)  # same bill as a trigger's
    # a finished run trained every iteration; any other, those before the segment it ended in
    done = None if run.get("done") else int(run["segment"]["start_iteration"])
    return usage.measured(totals, time.time(), plan, guards.run_limits(plan, run), done=done)


def state_machine_arn(execution_arn: str) -> str | None:
    """``arn:aws:states:<region>:<account>:execution:<machine>:<name>`` → the machine's ARN."""
    parts = execution_arn.split(":")
    if len(parts) != 8 or parts[5] != "execution":
        return None
    return ":".join([*parts[:5], "stateMachine", parts[6]])


def guard_stop(s3: Any, settings: Settings, state: Mapping[str, Any],
               execution: str) -> dict[str, Any] | None:
    """``{status, checkpoint_key, resume: {input, command}}`` for a run a guard stopped
    (``state.error.Error`` is DeadlineExceeded or BudgetExceeded), else None."""
    error, run = state.get("error"), state.get("run")
    if not isinstance(error, dict) or error.get("Error") not in GUARD_STATUSES:
        return None
    finished = run_state.parse_run(run)
    plan = run_state.load_run_plan(s3, settings.results_bucket, finished)
    following = run_state.next_state(finished, plan, epoch=finished["segment"]["epoch"])
    following.pop("cache", None)  # the trigger looks the cache up again
    totals = current_totals(s3, settings, finished)
    if totals is not None:  # the resumed run goes on counting from here, pause excluded
        following["usage"] = {**totals, usage.STOPPED_AT: round(time.time(), 3)}
    segment = following["segment"]
    checkpoint = settings.results_key(manifest_key(
        finished["run_id"], segment["start_iteration"], segment["resume_epoch"]))
    resume_input: dict[str, Any] = {"resume": following}
    limits = guards.run_limits(plan, finished)
    if limits is not None and totals is not None:
        resume_input["limits"] = guards.raised_limits(
            plan, limits, totals, now=time.time(), done=segment["start_iteration"])
    machine = state_machine_arn(execution) or "<the training state machine's ARN>"
    command = (f"aws stepfunctions start-execution --state-machine-arn {machine} "
               f"--input '{json.dumps(resume_input, separators=(',', ':'))}'")
    return {"status": GUARD_STATUSES[str(error["Error"])], "checkpoint_key": checkpoint,
            "resume": {"input": resume_input, "command": command}}
