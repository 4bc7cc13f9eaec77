"""Bad input to `python -m local run` fails before anything starts, with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.settings import DEFAULT_PLAN_PATH
from local.__main__ import main
from local.aws.template import LocalTemplate


def _plan(tmp_path: Path, **changes: dict[str, Any]) -> Path:
    data = json.loads(DEFAULT_PLAN_PATH.read_text())
    for section, values in changes.items():
        data[section].update(values)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["run", *argv]) == 2
    captured = capsys.readouterr()
    assert "started" not in captured.out  # no server, no worker
    return captured.err


def test_corrupt_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{"version": 1, "workload": ')
    assert "cannot read plan" in _fails(capsys, "--plan", str(path))


def test_invalid_plan_names_the_field(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = _plan(tmp_path, deployment={"workers": 0})
    assert "deployment.workers" in _fails(capsys, "--plan", str(path))


def test_workers_mismatch(capsys: pytest.CaptureFixture[str]) -> None:
    error = _fails(capsys, "--plan", str(DEFAULT_PLAN_PATH), "--workers", "8")
    assert "W mismatch" in error and "deployment.workers=4" in error


def test_missing_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _plan(tmp_path, workload={"name": "cnn-other", "dataset": "datasets/other"})
    assert "missing dataset" in _fails(capsys, "--plan", str(path))
    empty = tmp_path / "empty"
    empty.mkdir()
    error = _fails(capsys, "--plan", str(DEFAULT_PLAN_PATH), "--dataset", str(empty))
    assert "missing dataset" in error and "x.npy" in error


def test_plan_for_another_stack(tmp_path: Path, default_template: LocalTemplate,
                                capsys: pytest.CaptureFixture[str]) -> None:
    path = _plan(tmp_path, deployment={"memory_mb": 1024})
    error = _fails(capsys, "--plan", str(path), "--cdk-out", str(default_template.path.parent))
    assert "another stack" in error and "1024MB" in error


def test_bad_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--epochs must be > 0" in _fails(capsys, "--epochs", "0")


def test_dataset_with_mismatched_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    np.save(tmp_path / "x.npy", np.zeros((10, 1, 8, 8), np.uint8))
    np.save(tmp_path / "y.npy", np.zeros(9, np.int64))
    error = _fails(capsys, "--plan", str(DEFAULT_PLAN_PATH), "--dataset", str(tmp_path))
    assert "x has 10 rows, y 9" in error


def test_bad_fault_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert "ROLE:KEY=VALUE" in _fails(capsys, "--inject-env", "router:X=1")
    assert "ROLE:KEY=VALUE" in _fails(capsys, "--inject-env", "worker:no-equals")
    error = _fails(capsys, "--plan", str(DEFAULT_PLAN_PATH), "--channel", "s3",
                   "--restart-cache-at", "5")
    assert "--restart-cache-at needs the valkey channel" in error


def test_an_unknown_workload_is_refused_by_the_planner(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    error = _fails(capsys, "--workload", "no-such-workload")
    assert "the planner failed" in error and "no-such-workload" in error


def test_a_workload_and_a_plan_file_conflict(capsys: pytest.CaptureFixture[str]) -> None:
    error = _fails(capsys, "--plan", str(DEFAULT_PLAN_PATH), "--workload", "mlp-digits")
    assert "--workload" in error and "--plan" in error


def test_a_shipped_workload_without_a_local_dataset_names_what_to_pass(
        capsys: pytest.CaptureFixture[str]) -> None:
    error = _fails(capsys, "--workload", "squeezenet-cifar10", "--epochs", "1")
    assert "missing dataset" in error and "--dataset DIR" in error


@pytest.mark.parametrize(("kept", "words"), [
    ({"run_id": "done", "status": "SUCCEEDED", "resume_input": None}, "ended SUCCEEDED"),
    (None, "holds no run kept with --keep"),
])
def test_resume_needs_a_guard_stopped_kept_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               kept: dict[str, Any] | None, words: str) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "plan.json").write_text(DEFAULT_PLAN_PATH.read_text())
    if kept is not None:
        (tmp_path / "kept.json").write_text(json.dumps(kept))
    error = _fails(capsys, "--resume", str(tmp_path))
    assert error.startswith("fasdl local: --resume: ") and words in error, error


def test_resume_takes_the_kept_plan_not_another(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    error = _fails(capsys, "--resume", str(tmp_path), "--plan", str(DEFAULT_PLAN_PATH))
    assert "--resume: the kept run's plan and dataset are used" in error
