"""A whole run under Lambda emulation (``--emulate-lambda``: CPU share, memory limit, shaped
bandwidth), as ``bench/`` runs its measurements: every function stays within its memory, the
256 MB trigger included, and the pipelined exchange trains through the shaped channel.

Nothing else in the suite runs the workflow with the emulation on: a torch import that leaked
into the trigger's sandbox through the planner killed every emulated run at its first step
(Runtime.OutOfMemory, 257 MB of 256) while all other tests passed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.local_runs import worker_metric_values
from fasdl.contract.plan import Deployment, Plan, Training, Workload
from infra.settings import REPO_ROOT

RUN_TIMEOUT_S = 240


@pytest.mark.slow
def test_pipelined_run_under_lambda_emulation_succeeds_within_memory(tmp_path: Path) -> None:
    plan = Plan(
        workload=Workload(name="mlp-digits", model="mlp", dataset="datasets/digits",
                          samples=1438, dataset_mb=0.1, model_mb=0.07),
        deployment=Deployment(channel="s3", arch="x86_64", memory_mb=1024, workers=2),
        training=Training(aggregators=1, batch_aggregator=16, batch_non_aggregator=32,
                          max_global_batch=64, epochs=1, segment_iterations=1000,
                          exchange_chunks=2))
    plan_path = tmp_path / "plan.json"
    plan.save(plan_path)
    report_dir = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "local", "run", "--plan", str(plan_path), "--channel", "s3",
         "--emulate-lambda", "default", "--run-id", "emulated", "--report-dir",
         str(report_dir), "--timeout", str(RUN_TIMEOUT_S)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S + 60, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((report_dir / "report.json").read_text())
    assert report["status"] == "SUCCEEDED" and report["iterations"] == 29
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
