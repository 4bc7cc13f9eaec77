"""local/aws/logs_plane.py through boto3's real CloudWatch Logs client and
fasdl/aws/memory_report.py: the emulator's measurements come back as Lambda's REPORT lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from fasdl.aws.memory_report import REPORT_PATTERN, WorkerOutOfMemory, check_failed_attempt
from local.aws.logs_plane import LOG_GROUP, LocalLogs
from local.lambda_.invocation import Invocation


def _invocation(function: str, peak: float | None, started: float) -> Invocation:
    return Invocation(function, f"req-{function}-{peak}", b"{}", None, None, started, 2.0,
                      Path("x.log"), worker=0, memory_mb=256, peak_rss_mb=peak)


def _client(logs: LocalLogs) -> Any:
    return boto3.client("logs", region_name="us-east-1", endpoint_url=logs.endpoint_url,
                        aws_access_key_id="x", aws_secret_access_key="y")


def test_report_lines_of_the_worker_since_a_time() -> None:
    invocations = [_invocation("Worker", 120.4, 100.0), _invocation("Worker", 300.0, 10.0),
                   _invocation("Trigger", 90.0, 100.0), _invocation("Worker", None, 100.0)]
    with LocalLogs("Worker") as logs:
        logs.read_from(lambda: invocations)
        events = _client(logs).filter_log_events(
            logGroupName=LOG_GROUP, startTime=50_000, filterPattern=REPORT_PATTERN)["events"]
        # only the worker's invocations that ran and ended after startTime
        assert [e["message"] for e in events] == [
            "REPORT RequestId: req-Worker-120.4\tDuration: 2000.00 ms\tBilled Duration: "
            "2000 ms\tMemory Size: 256 MB\tMax Memory Used: 121 MB\t"]
        with pytest.raises(WorkerOutOfMemory, match="Max Memory Used 300 MB"):
            check_failed_attempt(_client(logs), LOG_GROUP, now_ms=200_000, window_s=200)


def test_unknown_log_group_is_refused_as_aws_does() -> None:
    with LocalLogs("Worker") as logs, pytest.raises(Exception, match="ResourceNotFound"):
        _client(logs).filter_log_events(logGroupName="/nope", filterPattern=REPORT_PATTERN)
