"""The single-process reference a local run is plotted against (local.run.reference)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fasdl.contract.plan import Plan
from fasdl.datasets.digits import build_digits
from fasdl.training.data import Partition
from infra.settings import DEFAULT_PLAN_PATH
from local.run.reference import reference_curve, segment_ends, single_process_reference
from local.run.report import format_summary, write_report


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("digits")
    build_digits(root)
    return {"x.npy": root / "train" / "x.npy", "y.npy": root / "train" / "y.npy",
            "test/x.npy": root / "test" / "x.npy", "test/y.npy": root / "test" / "y.npy"}


def _plan(epochs: int, segment_iterations: int) -> Plan:
    data = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["workload"]["samples"] = 1437  # the train split
    data["training"].update(epochs=epochs, segment_iterations=segment_iterations)
    return Plan.from_dict(data)


def test_one_point_per_segment_end_and_evaluating_changes_nothing(
        digits: dict[str, Path]) -> None:
    plan = _plan(epochs=3, segment_iterations=20)
    assert plan.total_iterations == 66 and segment_ends(plan) == [20, 40, 60, 66]
    said: list[str] = []
    curve = single_process_reference(plan, digits, said.append)
    assert [p["iteration"] for p in curve] == segment_ends(plan)
    assert len(said) == 1 + len(curve) and "reference to iteration 20" in said[1]
    train = np.load(digits["x.npy"])[:1437], np.load(digits["y.npy"])[:1437]
    test = Partition(np.load(digits["test/x.npy"]), np.load(digits["test/y.npy"]))
    only_end = reference_curve(plan, Partition(*train), test, [plan.total_iterations])
    assert only_end[-1]["accuracy"] == curve[-1]["accuracy"]  # mid-run evaluations are inert
    assert curve[-1]["accuracy"] > curve[0]["accuracy"] and curve[-1]["accuracy"] > 0.5
    assert curve[-1]["loss_mean"] < curve[0]["loss_mean"]
    assert curve[-1]["mcc"] is None  # ten classes


def test_the_report_plots_and_prints_the_reference(tmp_path: Path) -> None:
    segments = [{"index": i, "iterations": 20, "loss_first": 2.0, "loss_last": 1.0 / (i + 1),
                 "loss_mean": 1.5 / (i + 1), "accuracy": 0.5 + 0.1 * i, "mcc": None}
                for i in range(3)]
    reference = [{"iteration": 20 * (i + 1), "loss_mean": 1.4 / (i + 1),
                  "accuracy": 0.55 + 0.1 * i, "mcc": None} for i in range(3)]
    report = {"segments": segments, "reference": reference,
              "time_split_per_worker_s": {"0": {"compute": 1.0}}}
    written = write_report(report, tmp_path)
    assert (tmp_path / "training.png").stat().st_size > 1000 and len(written) == 3
    plain = write_report({**report, "reference": None}, tmp_path / "plain")
    assert plain[1].read_bytes() != (tmp_path / "training.png").read_bytes()
    summary = format_summary({
        "run_id": "r", "status": "SUCCEEDED", "channel": "s3", "workers": 4, "iterations": 60,
        "measured_s": 10.0, "predicted_s": 20.0, "predicted_cost_usd": None,
        "final_accuracy": 0.7, "final_mcc": None, "final_loss": 0.3, "reference": reference,
        "time_split_s": {"compute": 1.0}})
    assert "one process on the union batch (--reference), same recipe and rows: test " \
           "accuracy 0.750" in summary
