"""A model of the user's own at the planner's door: `workload new` measures what it can, `plan`
builds the model before any plan is written and refuses what a worker would fail on, each
with exit 2 and a one-line error naming the field or flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fasdl.contract.requirements import LOCAL_LAYERS_ENV, local_layer_dir
from planner.commands.cli import main
from tests.layer.wheels import make_wheel

MODEL = '''
import torch
from torch import nn


def build(num_classes, input_shape):
    channels = input_shape[0]
    return nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes))


def no_arguments():
    return nn.Linear(2, 2)


def not_a_module(num_classes, input_shape):
    return "a string"


def flat(num_classes, input_shape):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))


def five_classes(num_classes, input_shape):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 5))
'''
PAPER_COEFFICIENTS = {"a": 0.05, "b": 2.0, "m": 100.0, "k": 0.5, "c": 350.0}
PLAN = ["--epochs", "2", "--deadline", "3600", "--max-global-batch", "64"]


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine" / "tinynet.py"
    path.parent.mkdir()
    path.write_text(MODEL)
    return path


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """An importer's output: train/{x,y}.npy and meta.json (1 x 8 x 8, 3 classes)."""
    train = tmp_path / "data" / "train"
    train.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.save(train / "x.npy", rng.integers(0, 255, (120, 1, 8, 8), dtype=np.uint8))
    np.save(train / "y.npy", rng.integers(0, 3, 120).astype(np.int64))
    (train / "meta.json").write_text(json.dumps({
        "format": 1, "kind": "images", "input_shape": [1, 8, 8], "classes": 3,
        "class_names": ["a", "b", "c"], "samples": 120, "test_samples": 0,
        "mean": [0.5], "std": [0.25]}))
    return tmp_path / "data"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def new_workload(capsys: pytest.CaptureFixture[str], model: str, dataset: Path, out: Path,
                 *extra: str) -> tuple[int, dict[str, Any], str]:
    code, stdout, stderr = run(capsys, "workload", "new", "--model", model, "--dataset",
                               str(dataset), "--out", str(out), "--json", *extra)
    document = json.loads(stdout.splitlines()[-1]) if code == 0 else {}
    return code, document, stderr


def test_workload_new_measures_the_model_and_the_data(
        capsys: pytest.CaptureFixture[str], model_file: Path, dataset: Path,
        tmp_path: Path) -> None:
    out = tmp_path / "mine.json"
    code, document, _ = new_workload(capsys, f"{model_file}:build", dataset, out)
    assert code == 0
    written = json.loads(out.read_text())
    assert written == document["workload"]
    # Conv2d(1, 4, 3) + bias and Linear(4, 3) + bias: 40 + 15 parameters
    assert written["model_mb"] == round(55 * 4 / 2**20, 4)
    assert written["samples"] == 120 and written["classes"] == 3
    assert written["input_shape"] == [1, 8, 8]
    assert written["normalization"] == {"mean": [0.5], "std": [0.25]}
    assert written["recipe"]["augmentation"] == "images"  # the importer's kind
    sizes = sum((dataset / "train" / name).stat().st_size for name in ("x.npy", "y.npy"))
    assert written["dataset_mb"] == round(sizes / 2**20, 4)
    assert not {"a", "b", "m", "k", "c"} & set(written)
    assert document["next"] == f"python -m local profile --workload {out}"


@pytest.mark.parametrize(("model", "flag", "message"), [
    ("{file}:missing", "--model", "has no function 'missing'"),
    ("{file}:no_arguments", "--model", "must be function(num_classes, input_shape)"),
    ("{file}:not_a_module", "--model", "not a torch.nn.Module"),
    ("{folder}/absent.py:build", "--model", "not found"),
])
def test_workload_new_refuses_a_model_a_worker_could_not_build(
        capsys: pytest.CaptureFixture[str], model_file: Path, dataset: Path, tmp_path: Path,
        model: str, flag: str, message: str) -> None:
    reference = model.format(file=model_file, folder=model_file.parent)
    code, _, stderr = new_workload(capsys, reference, dataset, tmp_path / "w.json")
    assert code == 2
    assert stderr.startswith(f"error: argument {flag}: ") and message in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "w.json").exists()


def test_workload_new_checks_the_input_shape_against_the_data(
        capsys: pytest.CaptureFixture[str], model_file: Path, dataset: Path,
        tmp_path: Path) -> None:
    code, _, stderr = new_workload(capsys, f"{model_file}:build", dataset,
                                   tmp_path / "w.json", "--input-shape", "3", "8", "8")
    assert code == 2
    assert "argument --input-shape: the dataset's rows are [1, 8, 8]" in stderr


def profiled(written: Path, **changes: Any) -> Path:
    """The workload as a profile would leave it: coefficients added, fields changed."""
    data = {**json.loads(written.read_text()), **PAPER_COEFFICIENTS, **changes}
    path = written.with_name(f"profiled-{len(changes)}-{'-'.join(changes)}.json")
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def written(capsys: pytest.CaptureFixture[str], model_file: Path, dataset: Path,
            tmp_path: Path) -> Path:
    out = tmp_path / "mine.json"
    assert new_workload(capsys, f"{model_file}:build", dataset, out)[0] == 0
    return out


def test_plan_refuses_an_unprofiled_workload_with_the_profile_command(
        capsys: pytest.CaptureFixture[str], written: Path) -> None:
    code, _, stderr = run(capsys, "plan", "--workload", str(written), *PLAN)
    assert code == 2
    assert "is not profiled yet" in stderr
    assert "python -m local profile --workload" in stderr
    assert "-c workload=<its file> -c profiling=true" in stderr
    assert "python -m planner fit --workload" in stderr


def test_plan_builds_the_users_model(capsys: pytest.CaptureFixture[str], written: Path,
                                     tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    code, stdout, _ = run(capsys, "plan", "--workload", str(profiled(written)), *PLAN,
                          "--out", str(out), "--json")
    assert code == 0, stdout
    plan = json.loads(out.read_text())
    assert plan["workload"]["model"].endswith("tinynet.py:build")
    assert plan["workload"]["input_shape"] == [1, 8, 8] and plan["workload"]["classes"] == 3
    assert plan["training"]["augmentation"] == "images"
    assert json.loads(stdout)["warnings"] == []  # no profiled range recorded: nothing to say


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"model": "mynet"}, "workload.model", "unknown model 'mynet'"),
    ({"model_mb": 1.5}, "workload.model_mb", "must be 0.0002"),
    ({"model": "{file}:five_classes", "model_mb": round(325 * 4 / 2**20, 4)},
     "workload.input_shape", "maps a batch of [2, 1, 8, 8] to [2, 5], expected [2, 3]"),
    ({"model": "{file}:flat", "input_shape": [1, 4, 4], "model_mb": round(195 * 4 / 2**20, 4)},
     "workload.input_shape", "forward fails on a batch of [2, 1, 4, 4]"),
    ({"classes": None}, "classes", "is required for a model of your own"),
    # a copied workload that states its shape: a registry model is held to it too
    ({"model": "resnet18"}, "workload.model_mb", "must be 42.6"),
])
def test_plan_refuses_what_a_worker_would_fail_on(
        capsys: pytest.CaptureFixture[str], written: Path, model_file: Path,
        changes: dict[str, Any], field: str, message: str) -> None:
    changes = {key: value.format(file=model_file) if isinstance(value, str) else value
               for key, value in changes.items()}
    code, _, stderr = run(capsys, "plan", "--workload", str(profiled(written, **changes)),
                          *PLAN)
    assert code == 2
    assert field in stderr and message in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1


def test_a_plan_outside_the_profiled_memories_says_so(
        capsys: pytest.CaptureFixture[str], written: Path) -> None:
    high = profiled(written, profiled_memory_mb=[2048.0, 4096.0])
    code, stdout, _ = run(capsys, "plan", "--workload", str(high), *PLAN,
                          "--max-memory", "1024", "--json")
    assert code == 3  # searched within the profiled memories only, all above the quota
    assert json.loads(stdout)["hint"].startswith("memory searched within the profiled 2048-4096")
    code, stdout, _ = run(capsys, "plan", "--workload", str(high), *PLAN,
                          "--max-memory", "1024", "--json", "--extrapolate-memory")
    assert code == 0
    document = json.loads(stdout)
    assert document["plan"]["deployment"]["memory_mb"] <= 1024
    assert any("outside the memories the workload was profiled at (2048-4096 MB)" in warning
               for warning in document["warnings"])


def test_the_requirements_file_goes_into_the_workload_and_the_plan(
        capsys: pytest.CaptureFixture[str], model_file: Path, dataset: Path,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pins are checked, then installed by pip from its configured sources (here a folder
    of one wheel made on the spot) into the file's local layer, which builds the model."""
    make_wheel(tmp_path / "wheels", "fasdl-test-extra", "1.0",
               {"fasdl_test_extra/__init__.py": b"VALUE = 1\n"})
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    monkeypatch.setenv(LOCAL_LAYERS_ENV, str(tmp_path / "layers"))
    requirements = tmp_path / "requirements-model.txt"
    requirements.write_text("fasdl-test-extra>=1\n")
    out = tmp_path / "mine.json"
    code, _, stderr = new_workload(capsys, f"{model_file}:build", dataset, out,
                                   "--requirements", str(requirements))
    assert code == 2 and not out.exists()
    assert stderr.startswith("error: argument --requirements: ")
    assert "requirements-model.txt:1: 'fasdl-test-extra>=1' is not an exact pin" in stderr
    requirements.write_text("fasdl-test-extra==9.9\n")  # no such version anywhere
    code, _, stderr = new_workload(capsys, f"{model_file}:build", dataset, out,
                                   "--requirements", str(requirements))
    assert code == 2 and not out.exists()
    (error,) = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert error.endswith("pip could not install fasdl-test-extra==9.9: No matching "
                          "distribution found for fasdl-test-extra==9.9")
    requirements.write_text("fasdl-test-extra==1.0\n")
    code, document, _ = new_workload(capsys, f"{model_file}:build", dataset, out,
                                     "--requirements", str(requirements))
    assert code == 0 and document["workload"]["requirements"] == str(requirements)
    assert (local_layer_dir(requirements) / "python" / "fasdl_test_extra").is_dir()
    plan = tmp_path / "plan.json"
    code, _, _ = run(capsys, "plan", "--workload", str(profiled(out)), *PLAN, "--out", str(plan))
    assert code == 0
    assert json.loads(plan.read_text())["workload"]["requirements"] == str(requirements)
    requirements.unlink()
    code, _, stderr = run(capsys, "plan", "--workload", str(profiled(out)), *PLAN)
    assert code == 2
    assert "workload.requirements" in stderr and "cannot read" in stderr


def test_samples_from_aws_fit_into_a_profile_of_the_users_workload(
        capsys: pytest.CaptureFixture[str], written: Path, tmp_path: Path) -> None:
    """The AWS path (docs/profiling.md): the profiling state machine's samples, fitted with
    `fit --workload`, keep the workload's own model, shape, classes and dataset, and plan."""
    from tests.planner.fit_samples import train_records, transfer_records, write

    samples = write(tmp_path / "samples.jsonl", train_records(0.01) + transfer_records(0.01))
    code, stdout, _ = run(capsys, "fit", "--samples", samples, "--out",
                          str(tmp_path / "aws.json"), "--workload", str(written))
    assert code == 0, stdout
    fitted = json.loads((tmp_path / "aws-workload.json").read_text())
    base = json.loads(written.read_text())
    for name in ("name", "model", "model_mb", "input_shape", "classes", "normalization",
                 "dataset", "samples", "dataset_mb", "recipe"):
        assert fitted[name] == base[name], name
    assert fitted["a"] > 0 and fitted["k"] > 0
    code, _, stderr = run(capsys, "plan", "--workload", str(tmp_path / "aws-workload.json"),
                          "--platform", str(tmp_path / "aws-platform.json"), *PLAN)
    assert code == 0, stderr
    code, _, stderr = run(capsys, "fit", "--samples", samples, "--out",
                          str(tmp_path / "x.json"), "--workload", str(tmp_path / "absent.json"))
    assert code == 2 and "argument --workload: cannot read" in stderr
