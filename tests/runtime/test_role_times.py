"""The summary's per-role measurements (fasdl.run.role_times) from worker results."""

from __future__ import annotations

from typing import Any

import pytest

from fasdl.run.results import kept_attempts, summarize
from fasdl.run.role_times import role_of, role_times


def result(worker: int, role: str, batch: int, *, iterations: int, compute_s: float,
           upload_s: float, total_s: float, load_s: float, billed_ms: int) -> dict[str, Any]:
    return {"worker": worker, "role": role, "batch": batch, "workload": "cnn-digits",
            "iterations_done": iterations,
            "time": {"compute_s": compute_s, "upload_s": upload_s, "download_s": 0.5,
                     "aggregate_s": 0.0, "idle_s": 0.0, "load_s": load_s, "total_s": total_s},
            "invocation": {"billed_ms": billed_ms, "memory_mb": 1024}}


def test_role_of_splits_at_k() -> None:
    assert [role_of(worker, 2) for worker in range(3)] == ["aggregator", "aggregator",
                                                          "non_aggregator"]


def test_roles_divide_by_iterations_and_split_cold_from_warm_startup() -> None:
    cold = [result(0, "aggregator", 16, iterations=10, compute_s=2.0, upload_s=1.0,
                   total_s=5.0, load_s=0.5, billed_ms=9000),
            result(1, "non_aggregator", 32, iterations=10, compute_s=4.0, upload_s=0.5,
                   total_s=6.0, load_s=0.5, billed_ms=7000)]
    warm = [result(0, "aggregator", 16, iterations=10, compute_s=2.2, upload_s=1.0,
                   total_s=4.0, load_s=0.2, billed_ms=4100),
            result(1, "non_aggregator", 32, iterations=10, compute_s=3.8, upload_s=0.5,
                   total_s=5.0, load_s=0.2, billed_ms=5100)]
    roles = role_times([(0, cold), (1, warm)])
    aggregator = roles["aggregator"]
    assert aggregator["memory_mb"] == 1024 and aggregator["batch"] == 16
    assert aggregator["iterations"] == 20 and aggregator["invocations"] == 2
    assert aggregator["compute_s_per_iteration"] == pytest.approx(4.2 / 20)
    # upload 1.0 + download 0.5 per invocation
    assert aggregator["exchange_s_per_iteration"] == pytest.approx(3.0 / 20)
    assert aggregator["iteration_s"] == pytest.approx(7.2 / 20)
    # billed 9 s of which 5 s in the segment: 4 s outside it (a fresh sandbox); warm 0.1 s
    assert aggregator["cold_start_s"] == pytest.approx(4.0)
    assert aggregator["warm_start_s"] == pytest.approx(0.1)
    assert aggregator["load_s"] == pytest.approx(0.35)
    assert aggregator["workload"] == "cnn-digits"
    assert aggregator["billed_s"] == pytest.approx(13.1)
    assert roles["non_aggregator"]["batch"] == 32


def test_summary_has_roles_of_the_kept_attempt_only() -> None:
    failed = [result(0, "aggregator", 16, iterations=3, compute_s=9.0, upload_s=9.0,
                     total_s=20.0, load_s=1.0, billed_ms=20000)]
    kept = [result(0, "aggregator", 16, iterations=10, compute_s=1.0, upload_s=1.0,
                   total_s=3.0, load_s=0.2, billed_ms=3500)]
    summary = summarize({(0, 0): failed, (0, 1): kept}, workers=1)
    assert summary["roles"]["aggregator"]["compute_s_per_iteration"] == pytest.approx(0.1)
    assert "non_aggregator" not in summary["roles"]


def test_results_without_a_role_give_no_roles() -> None:
    old = result(0, "aggregator", 16, iterations=1, compute_s=1.0, upload_s=1.0, total_s=3.0,
                 load_s=0.1, billed_ms=3100)
    del old["role"]
    assert role_times([(0, [old])]) == {}


def test_each_segment_keeps_its_own_ws_complete_attempt_after_an_adaptive_change() -> None:
    """Segment 0 ran at W = 2 (its first attempt torn: one result of two), then the run
    scaled in to W = 1 for segment 1. Read with the final W = 1 for every segment, segment
    0's torn attempt looks complete and is kept; with each segment's own W, its second."""
    def at(worker: int, compute_s: float) -> dict[str, Any]:
        return result(worker, "aggregator", 16, iterations=10, compute_s=compute_s,
                      upload_s=1.0, total_s=3.0, load_s=0.2, billed_ms=3500)

    results = {(0, 0): [at(0, 9.0)], (0, 1): [at(0, 2.0), at(1, 2.0)], (1, 0): [at(0, 1.0)]}
    assert {i: attempt for i, (attempt, _) in kept_attempts(results, None).items()} == {
        0: 1, 1: 0}
    assert kept_attempts(results, 1)[0][0] == 0  # one W for the run: the torn attempt
    assert summarize(results, None)["segments"][0]["workers_reported"] == 2
