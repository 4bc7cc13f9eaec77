"""report.json and the printed summary expose each invocation's memory peak, the out-of-memory
kills and the injected service errors (local/run/invocation_stats.py, used by
local/run/runner.py)."""

from __future__ import annotations

from typing import Any

from infra import lambda_errors
from local.faults.service_faults import KINDS, ServiceError
from local.lambda_.invocation import Invocation
from local.run.invocation_stats import annotate_report, format_limits

ROLES = {"WorkerFn": "worker", "TriggerFn": "trigger"}


def _ran(function: str, peak: float, error: str | None = None) -> Invocation:
    return Invocation(function, "r", b"{}", "Unhandled" if error else None, error, 0.0, 1.0,
                      None, memory_mb=384 if function == "WorkerFn" else 256,
                      peak_rss_mb=peak)


def _refused(function: str, option: str) -> Invocation:
    error = ServiceError(KINDS[option], "r")
    return Invocation(function, "r", b"", None, error.name, 0.0, 0.0, None,
                      memory_mb=384, service_error=error)


def test_annotate_and_format() -> None:
    invocations = [_refused("TriggerFn", "service"), _ran("TriggerFn", 51.2),
                   _refused("WorkerFn", "throttled"), _refused("WorkerFn", "throttled"),
                   _ran("WorkerFn", 290.5), _ran("WorkerFn", 401.0, lambda_errors.OUT_OF_MEMORY)]
    report: dict[str, Any] = {"invocations": [{"function": i.function, "error": i.error_type}
                                              for i in invocations]}
    annotate_report(report, invocations, ROLES, memory_limit=True)
    rows = report["invocations"]
    assert [r["service_error"] for r in rows] == [
        KINDS["service"].name, None, lambda_errors.THROTTLED, lambda_errors.THROTTLED, None,
        None]
    assert [r["peak_rss_mb"] for r in rows] == [None, 51.2, None, None, 290.5, 401.0]
    assert report["memory"] == {"limit": "on", "functions": {
        "trigger": {"function": "TriggerFn", "memory_mb": 256, "peak_rss_mb": 51.2,
                    "invocations": 1, "out_of_memory": 0},
        "worker": {"function": "WorkerFn", "memory_mb": 384, "peak_rss_mb": 401.0,
                   "invocations": 2, "out_of_memory": 1}}}
    assert report["service_errors"] == {"trigger": {KINDS["service"].name: 1},
                                        "worker": {lambda_errors.THROTTLED: 2}}
    assert format_limits(report).splitlines() == [
        "  peak RSS per function (memory limit on): trigger 51 of 256 MB, worker 401 of 384 MB "
        "(1 killed)",
        f"  injected service errors (nothing ran): trigger {KINDS['service'].name} x1, "
        f"worker {lambda_errors.THROTTLED} x2"]


def test_nothing_injected() -> None:
    report: dict[str, Any] = {"invocations": [{}]}
    annotate_report(report, [_ran("Other", 20.0)], ROLES, memory_limit=False)
    assert report["service_errors"] == {}
    assert format_limits(report) == (
        "  peak RSS per function (memory limit off): Other 20 of 256 MB")
