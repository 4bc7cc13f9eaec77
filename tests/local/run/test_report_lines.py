"""Progress lines of `local run`: the segment count stays true after a shortened segment; a
segment that started from the initial weights says so."""

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


def test_a_segment_that_loaded_initial_weights_says_so() -> None:
    """Issue 43: the run never said that workload.initial_weights were loaded."""
    results = _results(0)
    for row in results.values():
        row["initial_weights"] = "datasets/mine/start.safetensors"
    line = segment_line((0, 0), results, 2)
    assert line.count("started from the initial weights datasets/mine/start.safetensors") == 1
    assert "initial weights" not in segment_line((1, 0), _results(1), 2)
