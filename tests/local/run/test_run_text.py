"""bert-mini on the generated text set, end to end: ``python -m fasdl.datasets textset`` and
``cola`` build the data, the planner plans workload bert-mini-textset (its recipe: AdamW,
learning rate 3e-4, linear warm-up over 10 % then linear decay), and ``python -m local run``
trains it through the synthesized state machine, on Valkey (the channel whose keys and frames
the text model's larger shards exercise; the weights do not depend on the channel,
tests/integration/test_workers.py); worker 0 reports the dev split's Matthews correlation
(CoLA's metric) per segment and finalize's summary carries it. One run: the steps a user takes
by hand. ``make run WORKLOAD=bert-mini-textset`` builds the same data and plans the same job
itself (tests/local/run/test_runner_defaults.py checks both steps of that path; the default
job's one command runs end to end in tests/local/run/test_run_e2e.py).

Two epochs, two segments: enough for the metric to be computed and reported per segment and
for the loss to fall from the first segment to the last. How far it trains is a convergence
claim, kept in bench/: `python -m bench.convergence --case text` trains the same job for 8
epochs against one process (dev MCC 0.45-0.66 over seeds 0-2 under hap and bsp, measured;
plain SGD with momentum stayed near chance), and the suite runs its short case
(tests/bench/test_convergence.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra.settings import REPO_ROOT

# Two epochs in two segments (of one epoch each) for the loss to fall from the first to the last
EPOCHS = 2
ITERATIONS_PER_EPOCH = 31  # 2,000 sentences at a global batch of 64
RUN_TIMEOUT_S = 300


def _python(*args: str, timeout_s: int = 120) -> str:
    done = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def text_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The imported text set and a plan for it: what a user runs, step by step."""
    work = tmp_path_factory.mktemp("text")
    _python("-m", "fasdl.datasets", "textset", str(work / "tsv"))
    imported = json.loads(_python("-m", "fasdl.datasets", "cola", str(work / "tsv"),
                                  str(work / "data"), "--max-length", "16"))
    assert imported["rows"] == {"train": 2000, "test": 500} and imported["truncated"] == 0
    _python("-m", "planner", "plan", "--workload", "bert-mini-textset", "--deadline", "900",
            "--max-global-batch", "64", "--epochs", str(EPOCHS), "--min-workers", "2",
            "--timeout", "300", "--out", str(work / "planned.json"))
    plan = json.loads((work / "planned.json").read_text())
    assert plan["workload"]["model"] == "bert-mini" and plan["deployment"]["workers"] == 2
    assert plan["training"]["optimizer"] == "adamw"  # the workload's recipe
    return work / "planned.json", work / "data"


@pytest.mark.slow
def test_bert_mini_trains_on_the_text_set(tmp_path: Path, text_job: tuple[Path, Path]) -> None:
    plan, data = text_job
    channel = "valkey"
    job = ["--plan", str(plan), "--dataset", str(data)]
    report_dir = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "local", "run", *job, "--channel", channel,
         "--segment-iterations", str(ITERATIONS_PER_EPOCH),
         "--run-id", f"text-{channel}",
         "--report-dir", str(report_dir), "--timeout", str(RUN_TIMEOUT_S)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S + 60, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((report_dir / "report.json").read_text())
    assert report["status"] == "SUCCEEDED" and report["channel"] == channel
    assert report["plan"]["workload"]["model"] == "bert-mini"
    summary = report["summary"]  # finalize's summary.json
    segments = summary["segments"]
    assert len(segments) == EPOCHS
    assert all(-1.0 <= s["mcc"] <= 1.0 for s in segments)
    assert 0.0 < summary["final_accuracy"] <= 1.0
    assert summary["final_mcc"] == segments[-1]["mcc"]
    assert all(s["loss_mean"] < 1.0 for s in segments)  # trained, not diverged (ln 2 = 0.69)
    assert segments[-1]["loss_mean"] < segments[0]["loss_mean"]
    assert report["final_mcc"] == summary["final_mcc"]  # the local report names the metric
    assert f"test MCC {summary['final_mcc']:.3f}" in done.stdout
    print(f"{channel}: dev MCC per segment {[s['mcc'] for s in segments]}, accuracy "
          f"{summary['final_accuracy']}, {report['measured_s']} s")
