"""Progress lines of `local run`: the segment count stays true after a shortened segment."""

from __future__ import annotations

from local.run.report import segment_line


def _results(index: int) -> dict[int, dict[str, object]]:
    segment = {"index": index, "start_iteration": 10 * index, "iterations": 10}
    return {w: {"segment": segment, "loss_first": 2.0, "loss_last": 1.0,
                "time": {"total_s": 3.0}} for w in range(2)}


def test_segment_line_counts_against_the_plan() -> None:
    line = segment_line((0, 0), _results(0), 2)
    assert "segment 1/2 (iterations 0-10, attempt 0): loss 2.0000 -> 1.0000" in line


def test_a_segment_beyond_the_plan_says_a_segment_was_shortened() -> None:
    line = segment_line((1, 0), _results(1), 1)
    assert "segment 2/1" not in line
    assert "segment 2 (the plan had 1; one was shortened)" in line
