"""fasdl/aws/memory_report.py: REPORT lines as Lambda writes them, read with FilterLogEvents
through botocore's Stubber (the real CloudWatch Logs model), and the out-of-memory verdict."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber

from fasdl.aws.memory_report import (
    REPORT_PATTERN,
    MemoryPeak,
    WorkerOutOfMemory,
    check_failed_attempt,
    parse_report,
    peaks_since,
)
from fasdl.contract.errors import next_memory_mb
from tests.runtime.conftest import offline_client

GROUP = "/aws/lambda/FasdlStack-ComputeWorker"
# As Lambda writes it (tab separated, trailing tab)
LINE = ("REPORT RequestId: 3f2e-11\tDuration: 2500.00 ms\tBilled Duration: 2500 ms\t"
        "Memory Size: 256 MB\tMax Memory Used: {used} MB\t")


@pytest.fixture
def client() -> Any:
    return offline_client("logs")


def _page(stub: Stubber, used: list[int], since: int, token: str | None = None,
          next_token: str | None = None) -> None:
    params: dict[str, Any] = {"logGroupName": GROUP, "startTime": since,
                              "filterPattern": REPORT_PATTERN}
    if token:
        params["nextToken"] = token
    page: dict[str, Any] = {"events": [{"message": LINE.format(used=u), "timestamp": since}
                                       for u in used]}
    if next_token:
        page["nextToken"] = next_token
    stub.add_response("filter_log_events", page, params)


def test_report_line_parsed() -> None:
    assert parse_report(LINE.format(used=129)) == MemoryPeak("3f2e-11", 256, 129.0)
    assert parse_report("START RequestId: x Version: $LATEST") is None


def test_pages_are_followed(client: Any, stub: Stubber) -> None:
    _page(stub, [100, 120], 1000, next_token="t2")
    _page(stub, [130], 1000, token="t2")
    assert [p.max_used_mb for p in peaks_since(client, GROUP, 1000)] == [100, 120, 130]


def test_a_worker_at_its_memory_size_fails_the_run_with_the_measured_peak(
        client: Any, stub: Stubber) -> None:
    _page(stub, [120, 256, 251], 4_000)
    with pytest.raises(WorkerOutOfMemory, match=r"2 worker invocation\(s\).*Max Memory Used "
                                                r"256 MB of the planned M = Memory Size 256 MB"
                                                r".*memory_mb to 384"):
        check_failed_attempt(client, GROUP, now_ms=10_000, window_s=6)


def test_a_crash_well_under_the_memory_size_is_left_to_the_retry(
        client: Any, stub: Stubber) -> None:
    _page(stub, [120, 200], 0)
    check_failed_attempt(client, GROUP, now_ms=1_000, window_s=60)  # window clamps at 0


@pytest.mark.parametrize(("memory", "suggested"), [(128, 256), (1024, 1280), (1769, 2304),
                                                   (3008, 3840), (10_240, 10_240)])
def test_next_memory_is_a_quarter_more_on_the_grid(memory: int, suggested: int) -> None:
    assert next_memory_mb(memory) == suggested
