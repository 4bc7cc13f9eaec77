"""A run's measured figures: elapsed time, billed Lambda GB-seconds and requests, their cost.

Lambda bills each invocation's duration rounded up to the nearest millisecond times the
function's memory, in GB-seconds (GB = 1024 MB), plus a fee per request
(https://aws.amazon.com/lambda/pricing/; 1 ms granularity:
https://aws.amazon.com/blogs/aws/new-for-aws-lambda-1ms-billing-granularity-adds-cost-savings/).
The exact figures are the REPORT lines in CloudWatch Logs, which the trigger and finalize
cannot read cheaply, so every invocation records its own handler duration and memory size
(:func:`invocation_record`) and the run adds them up. That figure is labelled
:data:`MEASURED_BASIS`: it leaves out the INIT phase, which on-demand functions are billed for
since August 2025
(https://aws.amazon.com/blogs/compute/aws-lambda-standardizes-billing-for-init-phase/), the
Distributed Map's ``outcome`` calls, invocations that died before writing a result, and every
non-Lambda charge (Step Functions, S3, Valkey).

The running totals travel in the run state (``run.usage``, :data:`USAGE_FIELDS`), so they
survive "Continue as new"; the names of the measured-vs-predicted figures are the ones the
local report uses (local/run/report.py): ``measured_s``, ``predicted_s``, ``predicted_cost_usd``,
``measured_lambda_usd``. Stdlib only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from fasdl.contract.fields import is_number
from fasdl.contract.limits import Limits
from fasdl.contract.plan import Plan

MEASURED_BASIS = ("estimated from in-function durations (INIT phase, invocations that died "
                  "and non-Lambda charges not included)")
OTHER_BASIS = ("the plan's prediction of Step Functions, S3, Valkey and storage charges, pro rata "
               "of the iterations before the segment the run ended in (all, when it finished); "
               "not measured")
INVOCATION_FIELD = "invocation"  # a worker result's {billed_ms, memory_mb}
USAGE_FIELDS = ("started_at", "worker_gb_s", "worker_requests", "trigger_gb_s",
                "trigger_requests")
# Seconds from the execution's start until its first segment, in a run whose plan waited for
# its cache's pre-scaled minimum (fasdl.run.segment_actions; its clock started then): optional
CACHE_WAIT = "cache_wait_s"
# In the resume state of a run a guard stopped: when it stopped. The pause until the resume
# does not count as the run's time (:func:`resume_clock`), so a raised deadline means the same.
STOPPED_AT = "stopped_at"


class UsageError(ValueError):
    """A malformed ``run.usage``; the message names the field."""


def billed_ms(seconds: float) -> int:
    """Duration as Lambda bills it: rounded up to the next millisecond."""
    return max(1, math.ceil(seconds * 1000.0))


def gb_s(duration_ms: int, memory_mb: int) -> float:
    return duration_ms / 1000.0 * memory_mb / 1024.0


def invocation_record(seconds: float, memory_mb: int) -> dict[str, int]:
    """What one invocation writes about itself (worker results, ``invocation``)."""
    return {"billed_ms": billed_ms(seconds), "memory_mb": int(memory_mb)}


def memory_of(context: Any) -> int:
    """The invocation's memory size in MB: the context's (a string on Lambda), else the
    runtime's AWS_LAMBDA_FUNCTION_MEMORY_SIZE, else 0 (nothing billed is known)."""
    found = getattr(context, "memory_limit_in_mb", None) or os.environ.get(
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    try:
        return int(found) if found is not None else 0
    except ValueError:
        return 0


def new_usage(now: float) -> dict[str, float]:
    """A run's totals at its start (``now``: seconds since the epoch)."""
    return {"started_at": round(now, 3), "worker_gb_s": 0.0, "worker_requests": 0,
            "trigger_gb_s": 0.0, "trigger_requests": 0}


def usage_of(run: Mapping[str, Any]) -> dict[str, float] | None:
    """``run.usage`` checked, or None for a run state written before runs measured."""
    usage = run.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise UsageError(f"run state field 'run.usage': must be an object, got {usage!r}")
    given = [*USAGE_FIELDS, *([CACHE_WAIT] if CACHE_WAIT in usage else [])]
    for name in given:
        value = usage.get(name)
        if not is_number(value) or value < 0:
            raise UsageError(f"run state field 'run.usage.{name}': must be a number >= 0, "
                             f"got {value!r}")
    return {name: usage[name] for name in given}


def resume_clock(run: Mapping[str, Any], now: float) -> dict[str, float] | None:
    """``run.usage`` of a run starting again (``now``): after a guard's stop its clock skips
    the pause, ``started_at`` moved forward by it; None for a run state without usage."""
    totals = usage_of(run)
    stopped = run["usage"].get(STOPPED_AT) if totals is not None else None
    if totals is None or not is_number(stopped):
        return totals
    return {**totals, "started_at": round(totals["started_at"] + max(0.0, now - stopped), 3)}


def with_trigger(usage: Mapping[str, float], seconds: float, memory_mb: int) -> dict[str, float]:
    """The totals after one more trigger invocation of ``seconds`` at ``memory_mb``."""
    return {**usage, "trigger_gb_s": round(usage["trigger_gb_s"] + gb_s(billed_ms(seconds),
                                                                        memory_mb), 6),
            "trigger_requests": usage["trigger_requests"] + 1}


def results_usage(results: Iterable[Mapping[str, Any]]) -> tuple[float, int]:
    """(GB-s, requests) of the worker results that recorded their invocation."""
    total, requests = 0.0, 0
    for result in results:
        record = result.get(INVOCATION_FIELD)
        if isinstance(record, dict) and is_number(record.get("billed_ms")) \
                and is_number(record.get("memory_mb")):
            total += gb_s(int(record["billed_ms"]), int(record["memory_mb"]))
            requests += 1
    return total, requests


def with_workers(usage: Mapping[str, float], results: Iterable[Mapping[str, Any]]
                 ) -> dict[str, float]:
    worker_gb_s, requests = results_usage(results)
    return {**usage, "worker_gb_s": round(usage["worker_gb_s"] + worker_gb_s, 6),
            "worker_requests": usage["worker_requests"] + requests}


def lambda_usd(usage: Mapping[str, float], limits: Limits) -> float:
    """The Lambda charge of these totals at the plan's prices."""
    seconds = usage["worker_gb_s"] + usage["trigger_gb_s"]
    requests = usage["worker_requests"] + usage["trigger_requests"]
    return seconds * limits.lambda_usd_per_gb_s + requests * limits.lambda_usd_per_request


def predicted_other_usd(plan: Plan, done: int) -> float:
    """The plan's predicted non-Lambda cost (Step Functions, S3 requests and storage, Valkey
    ECPUs and storage), pro rata of the ``done`` iterations: those charges are not measured."""
    if plan.prediction is None or plan.total_iterations <= 0:
        return 0.0
    other = plan.prediction.cost_usd - plan.prediction.lambda_compute_usd
    return max(0.0, other) * min(done, plan.total_iterations) / plan.total_iterations


def cache_start(plan: Plan, usage: Mapping[str, float]) -> dict[str, Any] | None:
    """How a Valkey run met its cache: ``wait`` (its first segment waited ``waited_s`` from
    the execution's start for the pre-scaled minimum), ``ramp`` (it started at once and the
    plan charged ``ramp_s`` of a fresh cache's ramp) or ``warm`` (neither was charged: a warm
    cache, or an exchange the fresh cache serves); None without a cache prediction."""
    prediction = plan.prediction
    if prediction is None or not prediction.has_cache_ecpu:
        return None
    if prediction.cache_wait_s:
        return {"mode": "wait", "planned_wait_s": prediction.cache_wait_s,
                "waited_s": usage.get(CACHE_WAIT, 0.0)}
    if prediction.charges_cache_ramp:
        return {"mode": "ramp", "ramp_s": prediction.cache_ramp_s}
    return {"mode": "warm"}


def measured(usage: Mapping[str, float], now: float, plan: Plan,
             limits: Limits | None, *, done: int | None = None) -> dict[str, Any]:
    """The summary's measured figures with the plan's predictions beside them; ``done``: the
    iterations trained (default all), for the estimate of what is not measured."""
    prediction = plan.prediction
    return {
        "measured_s": round(max(0.0, now - usage["started_at"]), 3),
        "predicted_s": prediction.time_s if prediction else None,
        "cache_start": cache_start(plan, usage),
        "billed_gb_s": {"worker": round(usage["worker_gb_s"], 3),
                        "trigger": round(usage["trigger_gb_s"], 3)},
        "lambda_requests": int(usage["worker_requests"] + usage["trigger_requests"]),
        "measured_lambda_usd": (round(lambda_usd(usage, limits), 6)
                                if limits is not None else None),
        "predicted_cost_usd": prediction.cost_usd if prediction else None,
        "predicted_lambda_usd": prediction.lambda_compute_usd if prediction else None,
        "measured_basis": MEASURED_BASIS,
        "estimated_other_usd": round(predicted_other_usd(
            plan, plan.total_iterations if done is None else done), 6),
        "estimated_other_basis": OTHER_BASIS,
    }
