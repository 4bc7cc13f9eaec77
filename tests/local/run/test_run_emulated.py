"""A whole run under Lambda emulation (``--emulate-lambda``: CPU share, memory limit, shaped
bandwidth), as ``bench/`` runs its measurements; one run, two sets of checks of it:

- every function stays within its memory, the 256 MB trigger included, and the pipelined
  exchange trains through the shaped channel. Nothing else in the suite runs the workflow with
  the emulation on: a torch import that leaked into the trigger's sandbox through the planner
  killed every emulated run at its first step (Runtime.OutOfMemory, 257 MB of 256) while all
  other tests passed;
- ``planner calibrate`` reads its report against a profile 30 % slower than the run and brings
  the error under 8 %.

The job: cnn-digits, W = 2, K = 1 (an aggregator at B = 16 and a non-aggregator at B = 128),
1,024 MB, 3 epochs, the exchange in two chunks. cnn-digits steps take a few ms, so batches only
2 x apart were measured within the throttle's 10 ms tick jitter of each other.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench.local_runs import worker_metric_values
from fasdl.contract.plan import Deployment, Plan, Training
from infra.settings import REPO_ROOT
from planner.commands.cli import main
from planner.model.inputs.profiles import load_workload

RUN_TIMEOUT_S = 240
TRUE = load_workload("cnn-digits")  # this machine's profile of the job's model
MEMORY_MB = 1024
EPOCHS = 3
GLOBAL_BATCH = 16 + 128
SAMPLES = 1438  # the train split local runs build from scikit-learn's digits


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one emulated run's report directory (report.json, summary.json, logs/)."""
    work = tmp_path_factory.mktemp("emulated")
    plan = Plan(workload=TRUE.workload,
                deployment=Deployment(channel="s3", arch="x86_64", memory_mb=MEMORY_MB,
                                      workers=2),
                training=Training(aggregators=1, batch_aggregator=16, batch_non_aggregator=128,
                                  max_global_batch=GLOBAL_BATCH, epochs=EPOCHS,
                                  segment_iterations=1000, exchange_chunks=2))
    plan.save(work / "plan.json")
    done = subprocess.run(
        [sys.executable, "-m", "local", "run", "--plan", str(work / "plan.json"), "--channel",
         "s3", "--emulate-lambda", "default", "--run-id", "emulated", "--report-dir",
         str(work / "report"), "--timeout", str(RUN_TIMEOUT_S)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S + 60, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work / "report"


@pytest.mark.slow
def test_pipelined_run_under_lambda_emulation_succeeds_within_memory(report_dir: Path) -> None:
    report = json.loads((report_dir / "report.json").read_text())
    assert report["status"] == "SUCCEEDED"
    assert report["iterations"] == EPOCHS * (SAMPLES // GLOBAL_BATCH)
    invocations = report["invocations"]
    names = " ".join(invocation["function"] for invocation in invocations)
    assert all(role in names for role in ("Trigger", "Worker", "Finalize"))
    for invocation in invocations:  # nothing near its limit, nothing killed
        assert invocation["error"] is None, invocation
        assert invocation["peak_rss_mb"] < 0.8 * invocation["memory_mb"], invocation
    logs = "".join(path.read_text(errors="replace")
                   for path in (report_dir / "logs").glob("ComputeWorker*.log"))
    assert "CPU capped at 0.58 vCPU" in logs  # 1024 / 1769 of a core: the emulation was on
    # every iteration meters its CPU; over the run a worker cannot have used more than its
    # share of the wall time (the throttle's 20 ms burst allowance aside)
    cpu, wall = (worker_metric_values(report_dir / "logs", name)
                 for name in ("CpuTime", "IterationTime"))
    assert sorted(cpu) == sorted(wall) == [0, 1]
    for worker in cpu:
        assert len(cpu[worker]) == len(wall[worker]) > 10
        assert all(value > 0 for value in cpu[worker])
        assert sum(cpu[worker]) <= 0.58 * sum(wall[worker]) + 0.05


@pytest.mark.slow
def test_calibrate_on_the_emulated_run_brings_a_30_percent_off_profile_under_8_percent(
        report_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run's measured compute per iteration, read by calibrate against a profile 30 %
    slower than the run (the cnn-digits profile with a set so that its prediction is 1.3 x
    what was measured), gives the bench.prediction-style error |predicted - measured| /
    measured: above 8 % before, under 8 % after."""
    report = report_dir / "report.json"
    assert json.loads(report.read_text())["platform"].startswith("local-emulation (")
    roles = json.loads(report.read_text())["summary"]["roles"]
    assert set(roles) == {"aggregator", "non_aggregator"}
    assert roles["aggregator"]["batch"] == 16 and roles["non_aggregator"]["batch"] == 128
    assert roles["aggregator"]["cold_start_s"] > 0 and roles["aggregator"]["billed_s"] > 0
    # a 30 % slow profile of this machine: a scaled so that the total prediction (iterations
    # x per iteration, as calibrate sums it) is 1.3 x the total measured; a role's own error
    # depends on how the measured batch slope differs from the profile's (5-70 % measured)
    ratio = (sum(role["iterations"] * float(TRUE.train_time(role["batch"], MEMORY_MB))
                 for role in roles.values())
             / sum(role["iterations"] * role["compute_s_per_iteration"]
                   for role in roles.values()))
    off = tmp_path / "off.json"
    off.write_text(json.dumps(replace(TRUE, a=float(f"{TRUE.a * 1.3 / ratio:.6g}")).to_dict()))
    assert main(["calibrate", str(report), "--workload", str(off), "--platform",
                 "aws-lambda-x86_64-s3", "--measured-on", "local-emulation", "--json"]) == 0
    found = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    old_errors = [abs(row["old_error"]) for row in found["roles"]]
    new_errors = [abs(row["new_error"]) for row in found["roles"]]
    assert found["total"]["old_error"] == pytest.approx(0.3, abs=0.01)
    assert max(old_errors) >= 0.29  # the total is the roles' weighted mean
    assert max(new_errors) < 0.08 and abs(found["total"]["new_error"]) < 0.08
    assert found["workload"]["provenance"]["compute"]["platform"] == "local-emulation"
