"""An adaptive run end to end (issue 42): ``planner plan --adaptive cost --workers-max 6``, the
synthesized state machine with its "Re-plan segment" state and the re-plan function from the
template, real servers, one process per invocation.

The plan is priced by the shipped cnn-digits profiles; this machine runs it far behind them
(cold starts of seconds, two cores shared by every invocation), yet the guard deadline is
generous, so policy ``cost`` finds a cheaper configuration that keeps the deadline and changes
to it at an epoch's start (measured: W = 4 to 1, whose segment then covers the rest). Every
boundary's decision is recorded once, the run ends on the changed plan, and summary.json and
report.json list the same decisions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fasdl.contract.plan import Plan
from infra.settings import REPO_ROOT
from tests.local.runs import local_run

EPOCHS = 3  # a segment each as planned
CEILING = 6
RUN_TIMEOUT_S = 300


def plan_adaptive(directory: Path) -> Path:
    """The planner's adaptive plan (its profiles beside it), a segment per epoch."""
    out = directory / "plan.json"
    done = subprocess.run(
        [sys.executable, "-m", "planner", "plan", "--workload", "cnn-digits", "--epochs",
         str(EPOCHS), "--deadline", "3000", "--max-global-batch", "128", "--min-workers", "4",
         "--adaptive", "cost", "--workers-max", str(CEILING), "--out", str(out), "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    plan = Plan.from_dict(data)
    data["training"]["segment_iterations"] = plan.iterations_per_epoch
    out.write_text(json.dumps(data))
    assert (directory / "plan.profiles.json").is_file()
    return out


@pytest.mark.slow
def test_an_adaptive_run_records_each_decision_and_trains_on_the_changed_plan(
        tmp_path: Path) -> None:
    plan_path = plan_adaptive(tmp_path)
    plan = Plan.load(plan_path)
    assert plan.deployment.workers >= 4 and plan.deployment.ceiling == CEILING
    result = local_run(plan_path, None, tmp_path / "run", "adaptive-1",
                       timeout_s=RUN_TIMEOUT_S)
    assert result.code == 0, result.output[-4000:]
    report = result.report
    adaptations = report["adaptations"]
    assert adaptations == report["summary"]["adaptations"]
    assert adaptations and adaptations[0]["segment"] == 1  # a decision at the first boundary
    changes = [a for a in adaptations if a["action"] == "change"]
    assert changes, adaptations  # far ahead of a cost plan: a cheaper configuration
    first = changes[0]
    assert first["policy"] == "cost" and first["chosen"]["workers"] <= CEILING
    assert first["chosen"] != first["current"]
    assert first["after"][1] < 0.9 * first["before"][1]  # it pays for itself, with margin
    assert first["applies_from_iteration"] % plan.iterations_per_epoch == 0  # an epoch start
    # the run switched to the plan the decision wrote and trained on its workers to the end
    assert report["summary"]["plan_key"].endswith(f"/plans/{first['segment']:05d}.json")
    workers_of = {s["index"]: s["workers"] for s in report["segments"]}
    assert workers_of[0] == plan.deployment.workers
    assert workers_of[first["segment"]] == first["chosen"]["workers"]
    assert sum(s["iterations"] for s in report["segments"]) == plan.total_iterations
    assert f"re-plans: {len(adaptations)}" in result.output
    assert "before segment 1:" in result.output
    assert report["final_accuracy"] is not None
