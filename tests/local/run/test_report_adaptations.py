"""An adaptive run's decisions in the local report (local/run/report.py): one summary line per
decision, and the workers over the iterations beside the loss in training.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

from local.run.report import _training_figure, format_summary, write_report

matplotlib.use("Agg")


def config(workers: int) -> dict[str, int]:
    return {"workers": workers, "aggregators": 1, "batch_aggregator": 128 // workers,
            "batch_non_aggregator": 128 // workers}


ADAPTATIONS = [
    {"segment": 1, "action": "change", "reason": "cheaper with the deadline kept",
     "current": config(4), "chosen": config(1), "applies_from_iteration": 11},
    {"segment": 2, "action": "continue", "reason": "on course", "current": config(1),
     "chosen": None, "applies_from_iteration": 22},
]
SEGMENTS = [{"index": i, "iterations": 11, "workers": w, "loss_last": 1.0 / (i + 1),
             "loss_mean": 1.2 / (i + 1), "accuracy": 0.5 + 0.1 * i, "mcc": None}
            for i, w in enumerate((4, 1, 1))]


def test_the_summary_says_each_decision() -> None:
    summary = format_summary({
        "run_id": "r", "status": "SUCCEEDED", "channel": "s3", "workers": 4, "iterations": 33,
        "measured_s": 10.0, "predicted_s": 20.0, "predicted_cost_usd": None,
        "final_accuracy": 0.7, "final_mcc": None, "final_loss": 0.3,
        "adaptations": ADAPTATIONS, "time_split_s": {"compute": 1.0}})
    assert "re-plans: 2, 1 changed the configuration" in summary
    assert ("before segment 1: change: W=4 K=1 B^a=32 B^n=32 -> W=1 K=1 B^a=128 B^n=128 "
            "(cheaper with the deadline kept)") in summary
    assert "before segment 2: continue (on course)" in summary


def test_the_plot_shows_the_workers_beside_the_loss(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    figure = _training_figure(plt, SEGMENTS, [], ADAPTATIONS)
    axes: list[Any] = figure.get_axes()
    assert len(axes) == 3  # loss, the test metric, the workers beside the loss
    (workers,) = [a for a in axes if a.get_ylabel().startswith("workers W")]
    steps = workers.get_lines()[0]
    assert list(steps.get_ydata()) == [4, 1, 1, 1]
    assert [text.get_text() for text in workers.texts] == ["W 4→1"]
    plt.close(figure)
    static = _training_figure(plt, SEGMENTS, [], [])
    assert len(static.get_axes()) == 2
    plt.close(static)
    report = {"segments": SEGMENTS, "adaptations": ADAPTATIONS,
              "time_split_per_worker_s": {"0": {"compute": 1.0}}}
    assert (tmp_path / "training.png") in write_report(report, tmp_path)
