"""Progress lines of `local run`: the segment count stays true after a shortened segment; a
segment that started from the initial weights says so; a segment after an adaptive scale-in
is reported once its workers wrote."""

from __future__ import annotations

import io
import json

from local.run.report import Progress, segment_line


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


class _Listing:
    """list_objects_v2 pages and get_object of a dict of key -> JSON: Progress's S3 calls."""

    def __init__(self, objects: dict[str, dict[str, object]]) -> None:
        self.objects = objects

    def get_paginator(self, _name: str) -> _Listing:
        return self

    def paginate(self, **_kwargs: object) -> list[dict[str, object]]:
        return [{"Contents": [{"Key": key} for key in self.objects]}]

    def get_object(self, **kwargs: str) -> dict[str, object]:
        return {"Body": io.BytesIO(json.dumps(self.objects[kwargs["Key"]]).encode())}


def test_a_segment_after_a_scale_in_is_reported_once_its_fewer_workers_wrote() -> None:
    """Issue 42: after an adaptive change to fewer workers a segment's line never printed
    (Progress waited for the first plan's W results)."""
    objects: dict[str, dict[str, object]] = {}
    for index, workers in ((0, 3), (1, 2)):
        for worker, row in _results(index).items():
            if worker < workers:
                objects[f"runs/r/segments/{index}/{worker}.json"] = {
                    **row, "worker": worker, "workers": workers}
    objects["runs/r/segments/0/2.json"] = {**_results(0)[0], "worker": 2, "workers": 3}
    lines: list[str] = []
    progress = Progress(_Listing(objects), "bucket", "r", workers=3, total_segments=2,
                        say=lines.append)
    progress.poll()
    assert [line.split(" (")[0].strip() for line in lines] == ["segment 1/2", "segment 2/2"]
    progress.poll()
    assert len(lines) == 2


def test_results_without_a_worker_count_wait_for_the_plans_workers() -> None:
    objects = {f"runs/r/segments/0/{w}.json": {**row, "worker": w}
               for w, row in _results(0).items()}
    lines: list[str] = []
    Progress(_Listing(objects), "bucket", "r", workers=3, total_segments=1,
             say=lines.append).poll()
    assert lines == []
