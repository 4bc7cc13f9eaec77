"""CloudWatch Logs' ``FilterLogEvents`` on a loopback port: the worker function's REPORT lines,
as Lambda writes them, for the trigger's memory check (fasdl/aws/memory_report.py).

The lines are made from the emulator's finished invocations of the worker (its measured peak
RSS and memory size), in Lambda's format (``REPORT RequestId: <id>\\tDuration: ...\\tMemory
Size: 256 MB\\tMax Memory Used: 260 MB\\t``), filtered by ``startTime`` and the request's term
pattern. JSON 1.1 protocol (``X-Amz-Target: Logs_20140328.FilterLogEvents``); boto3 reaches it
through ``AWS_ENDPOINT_URL_CLOUDWATCH_LOGS``.
API: https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_FilterLogEvents.html
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any

from local.aws.loopback import LoopbackServer, Reply, Request
from local.aws.template import LOCAL_WORKER_LOG_GROUP
from local.lambda_.invocation import Invocation

LOG_GROUP = LOCAL_WORKER_LOG_GROUP  # bound to the trigger's FASDL_WORKER_LOG_GROUP
TARGET = "Logs_20140328.FilterLogEvents"


def report_line(invocation: Invocation) -> str:
    """Lambda's REPORT line of one invocation (Max Memory Used rounded up, as Lambda's MB)."""
    duration_ms = invocation.duration_s * 1000
    return (f"REPORT RequestId: {invocation.request_id}\tDuration: {duration_ms:.2f} ms\t"
            f"Billed Duration: {math.ceil(duration_ms)} ms\tMemory Size: "
            f"{invocation.memory_mb} MB\tMax Memory Used: "
            f"{math.ceil(invocation.peak_rss_mb or 0)} MB\t")


class LocalLogs(LoopbackServer):
    """Answers FilterLogEvents for the worker's log group while open."""

    title = "local CloudWatch Logs API"

    def __init__(self, worker_function: str) -> None:
        super().__init__()
        self.worker_function = worker_function
        self._invocations: Callable[[], Iterable[Invocation]] = lambda: ()

    def read_from(self, invocations: Callable[[], Iterable[Invocation]]) -> None:
        """Where the finished invocations come from (the emulator, once it exists)."""
        self._invocations = invocations

    def answer(self, request: Request) -> Reply:
        target = request.headers.get("X-Amz-Target", "")
        if target != TARGET:
            return _json(400, {"__type": "UnknownOperationException", "message": target})
        return _json(*self._filter(json.loads(request.body or b"{}")))

    def _filter(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if request.get("logGroupName") != LOG_GROUP:
            return 400, {"__type": "ResourceNotFoundException",
                         "message": "The specified log group does not exist."}
        since = int(request.get("startTime", 0))
        terms = [t for t in str(request.get("filterPattern", "")).split('"') if t.strip()]
        events = []
        for invocation in list(self._invocations()):
            ended_ms = int((invocation.started + invocation.duration_s) * 1000)
            if (invocation.function != self.worker_function or invocation.peak_rss_mb is None
                    or ended_ms < since):
                continue
            message = report_line(invocation)
            if all(term in message for term in terms):
                events.append({"logStreamName": "local", "timestamp": ended_ms,
                               "ingestionTime": ended_ms, "message": message,
                               "eventId": invocation.request_id})
        return 200, {"events": events, "searchedLogStreams": []}


def _json(status: int, data: dict[str, Any]) -> Reply:
    return status, {"Content-Type": "application/x-amz-json-1.1"}, json.dumps(data).encode()
