"""bench.orchestration at a small Distributed W: the synthesized machine, the stub Lambdas,
the real outcome summary and finalize reader, a retry, a shortened segment, continue-as-new."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import orchestration


def test_largest_payload_reads_inputs_outputs_and_parameters() -> None:
    events: list[dict[str, Any]] = [
        {"type": "TaskStateEntered", "stateEnteredEventDetails": {"input": "x" * 10}},
        {"type": "TaskScheduled", "taskScheduledEventDetails": {"parameters": "y" * 30}},
        {"type": "MapStateExited", "stateExitedEventDetails": {"output": "z" * 20}},
        {"type": "ExecutionStarted", "id": 1}]
    assert orchestration.largest_payload(events) == 30
    assert orchestration.largest_payload([]) == 0


@pytest.mark.slow
def test_a_small_wide_run_stays_inside_the_limits(capsys: pytest.CaptureFixture[str]) -> None:
    code = orchestration.main(["--workers", "48", "--segments", "3", "--sleep-ms", "1",
                               "--segments-per-execution", "3", "--timeout", "600"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and summary["ok"], summary
    # 5 attempts (segment 1 retried, segment 2 shortened): continued as new after 3
    assert summary["executions"] == 2
    assert 0 < summary["max_payload_kib"] < 256
    assert 0 < summary["max_history_events"] < 25_000
    assert summary["finalize_s"] > 0
