"""The planned local job's defaults: whole-epoch segments, at most DEFAULT_SEGMENTS of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fasdl.contract.plan import Plan
from infra.settings import DEFAULT_PLAN_PATH, REPO_ROOT
from local.faults.injection import InputError
from local.run.jobs import LOCAL_JOBS, local_job
from local.run.run_options import DEFAULT_SEGMENTS, RunOptions
from local.run.run_prep import _planned_defaults, prepare_plan, whole_epoch_segments


@pytest.mark.parametrize(("epochs", "epochs_per_segment"), [
    (1, 1), (3, 1), (10, 1), (25, 3), (LOCAL_JOBS["cnn-digits"].epochs, 4)])
def test_segments_are_whole_epochs_and_at_most_the_default_count(
        epochs: int, epochs_per_segment: int) -> None:
    data = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["training"]["epochs"] = epochs
    plan = whole_epoch_segments(Plan.from_dict(data))
    per_epoch = plan.iterations_per_epoch
    assert plan.training.segment_iterations == per_epoch * epochs_per_segment
    segments = -(-epochs * per_epoch // plan.training.segment_iterations)
    assert segments <= DEFAULT_SEGMENTS


def test_each_local_job_plans_its_own_epochs_and_workers() -> None:
    assert _planned_defaults(RunOptions()) == (40, 4)  # cnn-digits, make run's job
    assert _planned_defaults(RunOptions(workload="bert-mini-textset")) == (8, 2)
    assert _planned_defaults(RunOptions(workload="bert-mini-textset", epochs=3,
                                        workers=4)) == (3, 4)
    assert local_job("squeezenet-cifar10") is None  # no local data: --dataset is needed
    assert local_job("digits", "datasets/digits") is LOCAL_JOBS["cnn-digits"]


def test_the_text_job_builds_the_imported_text_set(tmp_path: Path) -> None:
    root = LOCAL_JOBS["bert-mini-textset"].build_dataset(tmp_path)
    x = np.load(root / "train" / "x.npy", allow_pickle=False)
    assert x.dtype == np.int32 and x.shape == (2000, 2, 16)
    assert np.load(root / "test" / "y.npy", allow_pickle=False).shape == (500,)


def test_the_runner_imports_neither_torch_nor_the_cdk(tmp_path: Path) -> None:
    """Every local run's parent process plans, builds the digits set and drives the servers;
    torch (only for ``--reference``) and aws_cdk (a Node process) cost it seconds each, paid
    by every end-to-end test."""
    code = ("import sys, pathlib; import local.__main__, local.run.runner; "
            "from local.run.jobs import LOCAL_JOBS; "
            f"LOCAL_JOBS['cnn-digits'].build_dataset(pathlib.Path({str(tmp_path)!r})); "
            "print(sorted(m for m in ('torch', 'aws_cdk') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_an_adaptive_plan_moved_to_another_channel_runs_static_and_says_so(
        tmp_path: Path) -> None:
    """Its re-plan profiles are the planned channel's: on another channel the run keeps its
    plan (the re-plan would refuse the profile at its first boundary)."""
    data = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["training"]["adaptive"] = "deadline"
    data["deployment"]["workers_max"] = 2 * data["deployment"]["workers"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    said: list[str] = []
    moved = prepare_plan(RunOptions(plan=path, channel="valkey"), tmp_path, said.append)
    assert moved.deployment.channel == "valkey" and moved.training.adaptive == "off"
    assert moved.deployment.workers_max is None
    assert said == ["the plan's re-plan profiles are for s3: on valkey the run keeps its plan "
                    "(training.adaptive off; plan on that channel to adapt)"]
    kept = prepare_plan(RunOptions(plan=path, channel="s3"), tmp_path, said.append)
    assert kept.training.adaptive == "deadline" and len(said) == 1
    with pytest.raises(InputError, match="--adaptive plans a job"):
        prepare_plan(RunOptions(plan=path, adaptive="off"), tmp_path, said.append)
