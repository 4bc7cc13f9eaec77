"""The fit's quality gates (planner/fit/gates.py): shape or absolute floor, what a failed fit
writes into the workload's provenance, and the plan's first line about it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.commands.cli import main
from planner.fit.fit_files import FitRequest, run_fit
from planner.fit.gates import (
    MAX_MEMORY_ERROR_MB,
    MAX_TIME_ERROR_S,
    judge_memory,
    judge_time,
)
from planner.fit.workload_fit import Quality
from planner.model.inputs.profiles import load_workload
from tests.planner.fit_samples import transfer_records, write

GOOD = Quality(points=6, r_squared=0.95, max_relative_error=0.1, max_absolute_error=0.3)
POOR = Quality(points=6, r_squared=-0.1, max_relative_error=0.57, max_absolute_error=0.002)


def test_a_good_shape_passes_whatever_the_absolute_errors() -> None:
    gate = judge_time(GOOD, np.array([0.3]), np.array([0.5]))
    assert gate.passed_by == "shape"


def test_small_errors_pass_by_the_floor_only_within_both_limits() -> None:
    iteration = np.array([0.05, 0.06])
    small = judge_time(POOR, np.array([0.002, 0.001]), iteration)
    assert small.passed_by == "absolute floor" and "R² -0.1000" in small.reason
    over_ms = judge_time(POOR, np.array([MAX_TIME_ERROR_S * 1.2, 0.001]), np.array([1.0, 1.0]))
    over_share = judge_time(POOR, np.array([0.002]), np.array([0.01]))  # 20 % of it
    for gate in (over_ms, over_share):
        assert not gate.passed and "worst error" in gate.reason
    assert "20.0% of the predicted iteration" in over_share.reason


def test_memory_passes_by_the_floor_in_megabytes() -> None:
    flat = Quality(points=6, r_squared=0.2, max_relative_error=0.03, max_absolute_error=9.0)
    assert judge_memory(flat).passed_by == "absolute floor"
    wide = Quality(points=6, r_squared=0.2, max_relative_error=0.03,
                   max_absolute_error=MAX_MEMORY_ERROR_MB + 1)
    assert not judge_memory(wide).passed


def _small_model(seed: int, spread: float) -> list[dict[str, Any]]:
    """A tabular MLP's steps: ~3 ms whatever B and M (under the CPU cap's burst), noise of
    ``spread`` seconds."""
    rng = np.random.default_rng(seed)
    return [{"kind": "train", "memory_mb": memory, "batch": batch,
             "seconds": 0.003 + 0.000001 * batch + spread * rng.random(),
             "peak_mb": 290.0 + 0.01 * batch + rng.random(), "model": "mlp", "model_mb": 0.02}
            for memory in (512, 1024) for batch in (64, 256, 1024)]


def _fit(tmp_path: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    samples = write(tmp_path / "s.jsonl", records + transfer_records(0.01))
    _, summary = run_fit(FitRequest(samples=[samples], out=str(tmp_path / "fit.json"),
                                    name="tabular", dataset_samples=3000, dataset_mb=0.3,
                                    measured_on="local-emulation"))
    return summary


def test_a_small_models_flat_times_fit_and_pass_by_the_floor(tmp_path: Path) -> None:
    summary = _fit(tmp_path, _small_model(0, 0.002))
    time_gate, memory_gate = summary["workload"]["gates"]
    assert summary["workload"]["time_quality"]["r_squared"] < 0.9  # the shape alone fails
    assert time_gate["passed_by"] == "absolute floor", time_gate  # errors under a ms pass
    assert memory_gate["passed"], memory_gate
    provenance = json.loads((tmp_path / "fit-workload.json").read_text())["provenance"]
    assert "failed_fit" not in provenance["compute"]


def test_times_flat_in_the_batch_fit_without_a_field_range_error(tmp_path: Path) -> None:
    flat = [{**record, "seconds": 0.021} for record in _small_model(1, 0.0)]
    summary = _fit(tmp_path, flat)  # b would run past the profile's 1e6 unbounded
    assert summary["workload"]["b"] <= 1e6
    assert summary["workload"]["gates"][0]["passed"]


def test_a_failed_fit_is_marked_and_the_plan_says_so_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    noisy = _small_model(2, 0.2)  # steps of 3-200 ms at random: no fit can pass
    summary = _fit(tmp_path, noisy)
    time_gate = summary["workload"]["gates"][0]
    assert not time_gate["passed"] and time_gate["passed_by"] is None
    workload = load_workload(str(tmp_path / "fit-workload.json"))
    compute = workload.provenance["compute"]
    assert compute.failed_fit and "below the quality gates" in compute.note
    assert not workload.provenance["memory"].failed_fit
    capsys.readouterr()
    code = main(["plan", "--workload", str(tmp_path / "fit-workload.json"), "--platform",
                 str(tmp_path / "fit-platform.json"), "--channel", "s3", "--deadline",
                 "3600", "--max-global-batch", "256", "--epochs", "2"])
    assert code == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("FAILED FIT: workload.compute's fit is below the profiler's "
                            "quality gates"), first
    assert main(["plan", "--workload", str(tmp_path / "fit-workload.json"), "--platform",
                 str(tmp_path / "fit-platform.json"), "--channel", "s3", "--deadline",
                 "3600", "--max-global-batch", "256", "--epochs", "2", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["confidence"]["failed_fit"] == ["workload.compute"]
