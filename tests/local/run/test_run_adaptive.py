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

from fasdl.contract.limits import BUDGET_EXCEEDED
from fasdl.contract.plan import Plan
from fasdl.run.fault_hooks import CRASH_ITERATION_ENV, CRASH_WORKER_ENV
from infra.settings import REPO_ROOT
from local.aws.template import synthesize
from tests.local.runs import Job, Run, local_run, resumed_run

EPOCHS = 3  # a segment each as planned
CEILING = 6
ACCOUNT_WORKERS = 5  # what the reference run's account concurrency holds: below the ceiling
RUN_TIMEOUT_S = 300
CRASH_AT = 20  # in the second segment, after the change at iteration 11


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


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    plan = plan_adaptive(tmp_path_factory.mktemp("adaptive"))
    return Job(plan, synthesize(plan, plan.parent / "cdk.out").parent)


@pytest.fixture(scope="module")
def reference(job: Job, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The undisturbed adaptive run, in an account whose concurrency holds W = 4 but not the
    ceiling (2 executions per worker): its re-plans keep within 5 workers."""
    return local_run(job.plan, job.cdk_out, tmp_path_factory.mktemp("reference") / "run",
                     "adaptive-1", "--account-concurrency", str(2 * ACCOUNT_WORKERS),
                     timeout_s=RUN_TIMEOUT_S)


@pytest.mark.slow
def test_an_adaptive_run_records_each_decision_and_trains_on_the_changed_plan(
        job: Job, reference: Run) -> None:
    plan = Plan.load(job.plan)
    assert plan.deployment.workers >= 4 and plan.deployment.ceiling == CEILING
    result = reference
    assert result.code == 0, result.output[-4000:]
    report = result.report
    adaptations = report["adaptations"]
    assert adaptations == report["summary"]["adaptations"]
    assert adaptations and adaptations[0]["segment"] == 1  # a decision at the first boundary
    # the trigger's concurrency check at the start bounds every decision below the ceiling
    assert {a["workers_max"] for a in adaptations} == {ACCOUNT_WORKERS}
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


@pytest.mark.slow
def test_a_crashed_segment_after_a_change_reruns_on_the_recorded_decision(
        job: Job, reference: Run, tmp_path: Path) -> None:
    """The only worker of the changed configuration dies mid-segment: the retry takes the
    run state the re-plan returned (its plan, its workers), decides nothing again, and the
    run ends with the undisturbed run's weights, bit for bit (both chose W = 1 at the first
    boundary: far ahead of a cost plan, nothing is cheaper than one worker)."""
    first = reference.report["adaptations"][0]
    assert first["action"] == "change" and first["chosen"]["workers"] == 1, first
    result = local_run(job.plan, job.cdk_out, tmp_path / "run", "adaptive-crash",
                       "--inject-env", f"worker:{CRASH_ITERATION_ENV}={CRASH_AT}",
                       "--inject-env", f"worker:{CRASH_WORKER_ENV}=0", timeout_s=RUN_TIMEOUT_S)
    assert result.code == 0, result.output[-4000:]
    report = result.report
    segments = [a["segment"] for a in report["adaptations"]]
    assert segments == sorted(set(segments))  # one decision per boundary, the retry none
    (decided,) = [a for a in report["adaptations"] if a["segment"] == first["segment"]]
    assert (decided["action"], decided["chosen"]) == ("change", first["chosen"])
    assert report["summary"]["retried_attempts"] == 1
    retried = [s for s in report["segments"] if s["attempt"] == 1]
    assert [s["workers"] for s in retried] == [1]  # the retry ran the recorded plan's worker
    assert result.model is not None and result.model == reference.model


@pytest.mark.slow
def test_a_run_resumed_after_a_guard_stop_re_plans_its_first_segment(
        job: Job, reference: Run, tmp_path: Path) -> None:
    """The budget guard stops the run at the first boundary, before its re-plan; the resumed
    execution re-plans the segment it issues ("Re-plan resumed segment"), makes the same
    change, and ends with the undisturbed adaptive run's weights."""
    kept = tmp_path / "kept"
    stopped = local_run(job.plan, job.cdk_out, tmp_path / "stopped", "adaptive-stop",
                        "--budget-usd", "0.0001", "--keep", str(kept), timeout_s=RUN_TIMEOUT_S)
    assert stopped.code == 1 and stopped.report["status"] == BUDGET_EXCEEDED, \
        stopped.output[-3000:]
    assert stopped.report["adaptations"] == [] and stopped.report["summary"] is None
    resumed = resumed_run(kept, job.cdk_out, tmp_path / "resumed", "--budget-usd", "5",
                          timeout_s=RUN_TIMEOUT_S)
    assert resumed.code == 0, resumed.output[-4000:]
    (decided, *_) = resumed.report["adaptations"]
    first = reference.report["adaptations"][0]
    assert (decided["segment"], decided["action"], decided["chosen"]) == (
        first["segment"], "change", first["chosen"])
    assert resumed.model is not None and resumed.model == reference.model
