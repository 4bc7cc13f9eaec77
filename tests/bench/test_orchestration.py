"""bench.orchestration at its smoke size, a small Distributed W: the synthesized machine, the
stub Lambdas, the real outcome summary and finalize reader, a retry, a shortened segment,
continue-as-new."""

from __future__ import annotations

from typing import Any

import pytest

from bench import orchestration
from tests.bench.smoke_run import run_smoke


def test_largest_payload_reads_inputs_outputs_and_parameters() -> None:
    events: list[dict[str, Any]] = [
        {"type": "TaskStateEntered", "stateEnteredEventDetails": {"input": "x" * 10}},
        {"type": "TaskScheduled", "taskScheduledEventDetails": {"parameters": "y" * 30}},
        {"type": "MapStateExited", "stateExitedEventDetails": {"output": "z" * 20}},
        {"type": "ExecutionStarted", "id": 1}]
    assert orchestration.largest_payload(events) == 30
    assert orchestration.largest_payload([]) == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_small_wide_run_stays_inside_the_limits() -> None:
    # the bench's smoke size (bench/smoke.py), as `make bench` runs it: W = 41, the smallest
    # Distributed Map
    summary, _ = run_smoke("orchestration", timeout_s=540)
    assert {"workers", "segments", "max_payload_kib", "max_history_events", "finalize_s", "ok",
            "executions", "trigger_max_s", "wall_s"} <= set(summary)
    assert summary["ok"] and (summary["workers"], summary["segments"]) == (41, 3), summary
    # 5 attempts (segment 1 retried, segment 2 shortened): continued as new after 3
    assert summary["executions"] == 2
    assert 0 < summary["max_payload_kib"] < 256
    assert 0 < summary["max_history_events"] < 25_000
    assert summary["finalize_s"] > 0
