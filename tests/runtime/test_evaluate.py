"""``python -m fasdl.evaluate MODEL DATASET_DIR [--meta FILE] [--json]`` on a run's
model.safetensors + model.json: the registry's models, a user's own (file.py:function), the
dataset's normalization, and bad input as one line with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.torch
import torch

from fasdl.evaluate import main
from fasdl.training import evaluation
from fasdl.training.augment import Normalization, evaluation_tensors
from tests.runtime.exported_model import (
    CHECKPOINT_META,
    MODEL,
    digits_with_head,
    export_files,
    predicted,
    trained,
    trained_registry_model,
    workload,
)

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": f"{ROOT / 'functions'}{os.pathsep}{ROOT}"}
# a user's own module: any names, a buffer of its own, built as function(classes, shape)
USER_NET = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, classes, shape):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(shape[0] * shape[1] * shape[2], 24),
                                  nn.BatchNorm1d(24), nn.ReLU())
        self.head = nn.Linear(24, classes)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        return self.head(self.body(x * self.scale))


def build(num_classes, input_shape):
    return Net(num_classes, input_shape)
'''


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("digits") / "digits"
    digits_with_head(out)
    return out


@pytest.fixture(scope="module")
def split(digits: Path) -> Path:
    return digits / "test-head"


@pytest.fixture(scope="module")
def model(digits: Path) -> torch.nn.Module:
    return trained_registry_model(digits)


@pytest.fixture(scope="module")
def files(model: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, Path]:
    return export_files(model, tmp_path_factory.mktemp("run"))


def _labels(split: Path) -> tuple[np.ndarray, np.ndarray]:
    return np.load(split / "x.npy"), np.load(split / "y.npy")


def test_cli_reports_the_accuracy_worker_zero_computes(
        model: torch.nn.Module, files: tuple[Path, Path], split: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    x, y = _labels(split)
    expected = float(np.mean(predicted(model, x, y) == y))  # as worker 0 batches it
    weights, _ = files
    assert main([str(weights), str(split), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["accuracy"] == expected and result["samples"] == len(y)
    assert (result["model"], result["classes"]) == (MODEL, 10)
    assert main([str(weights), str(split)]) == 0
    assert f"accuracy {expected:.4f} ({result['correct']}/{len(y)} samples)" in (
        capsys.readouterr().out)
    # the description elsewhere: --meta
    elsewhere = tmp_path / "weights.safetensors"
    elsewhere.write_bytes(weights.read_bytes())
    assert main([str(elsewhere), str(split), "--meta", str(files[1]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == expected


def test_plain_torch_reproduces_the_cli_accuracy(
        files: tuple[Path, Path], split: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The user guide's five lines, then the same batches: the same accuracy."""
    from fasdl.training.networks import build_model

    meta = json.loads(files[1].read_text())
    fresh = build_model(meta["model"], meta["classes"], tuple(meta["input_shape"]))
    fresh.load_state_dict(safetensors.torch.load_file(str(files[0])))
    fresh.eval()
    x, y = _labels(split)
    assert main([str(files[0]), str(split), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["accuracy"] == float(np.mean(predicted(fresh, x, y, meta["eval_batch"]) == y))


def test_cli_batches_as_the_export_says(files: tuple[Path, Path], split: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker 0 evaluates in batches of at most its training batch (its memory was planned
    for that batch's activations); the CLI batches the same way, so the logits are the same."""
    batches: list[int] = []
    original = evaluation.add_batch

    def counted(confusion: Any, model: torch.nn.Module, x: np.ndarray, y: np.ndarray,
                augmentation: str, **kwargs: Any) -> None:
        batches.append(len(y))
        original(confusion, model, x, y, augmentation, **kwargs)

    monkeypatch.setattr(evaluation, "add_batch", counted)
    assert main([str(files[0]), str(split), "--json"]) == 0
    assert batches == [32, 32, 32, 32, 22]


def test_cli_normalises_with_the_datasets_statistics(
        model: torch.nn.Module, split: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A ``normalize`` run: model.json carries workload.normalization, the CLI applies it."""
    seen: list[Any] = []
    original = evaluation.add_batch

    def spied(*args: Any, **kwargs: Any) -> None:
        seen.append(kwargs.get("normalization"))
        original(*args, **kwargs)

    monkeypatch.setattr(evaluation, "add_batch", spied)
    statistics = {"mean": [0.25], "std": [0.5]}
    weights, _ = export_files(model, tmp_path, {**CHECKPOINT_META, "augmentation": "normalize"},
                              workload(normalization=statistics))
    x, y = _labels(split)
    model.eval()
    with torch.no_grad():
        features = evaluation_tensors(x, y, "normalize",
                                      normalization=Normalization((0.25,), (0.5,)))[0]
        expected = float(np.mean(np.concatenate([
            model(features[start:start + 32]).argmax(1).numpy()
            for start in range(0, len(y), 32)]) == y))
    model.train()
    assert main([str(weights), str(split), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == expected
    assert seen and set(seen) == {Normalization((0.25,), (0.5,))}


def _user_net(tmp_path: Path) -> Any:
    """The user's nets/mine.py, written under ``tmp_path`` and imported as a user would."""
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "mine.py").write_text(USER_NET)
    sys.path.insert(0, str(tmp_path / "nets"))
    try:
        import mine  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path / "nets"))
        sys.modules.pop("mine", None)
    return mine


def test_cli_evaluates_a_users_own_module(digits: Path, split: Path, tmp_path: Path) -> None:
    """model.json names ``nets/mine.py:build``, resolved from the folder the command runs in;
    the state dict has the module's own names, and plain torch loads it into the user's own
    class."""
    mine = _user_net(tmp_path)
    torch.manual_seed(0)
    own = trained(mine.build(10, (1, 8, 8)), digits)
    reference = "nets/mine.py:build"
    weights, _ = export_files(own, tmp_path / "run", {**CHECKPOINT_META, "model": reference},
                              workload(reference, input_shape=[1, 8, 8], classes=10))
    assert set(safetensors.torch.load_file(str(weights))) == {
        "body.1.weight", "body.1.bias", "body.2.weight", "body.2.bias", "body.2.running_mean",
        "body.2.running_var", "body.2.num_batches_tracked", "head.weight", "head.bias",
        "scale"}
    fresh = mine.build(10, (1, 8, 8))
    fresh.load_state_dict(safetensors.torch.load_file(str(weights)))
    x, y = _labels(split)
    expected = float(np.mean(predicted(own, x, y) == y))
    assert float(np.mean(predicted(fresh, x, y) == y)) == expected
    done = subprocess.run([sys.executable, "-m", "fasdl.evaluate", str(weights), str(split),
                           "--json"], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["accuracy"] == expected and result["model"] == reference
    elsewhere = subprocess.run([sys.executable, "-m", "fasdl.evaluate", str(weights),
                                str(split)], cwd=digits, env=ENV, capture_output=True,
                               text=True, timeout=120, check=False)
    assert elsewhere.returncode == 2 and "file nets/mine.py not found" in elsewhere.stderr


def test_cli_bad_input_is_one_line_and_exit_2(files: tuple[Path, Path], digits: Path,
                                              split: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    weights, described = files
    alone = tmp_path / "alone" / "model.safetensors"
    alone.parent.mkdir()
    alone.write_bytes(weights.read_bytes())
    flat = tmp_path / "model.npy"
    np.save(flat, np.zeros(4, np.float32))
    truncated = tmp_path / "cut.safetensors"
    truncated.write_bytes(weights.read_bytes()[:-10])
    wide = tmp_path / "wide"
    wide.mkdir()
    np.save(wide / "x.npy", np.zeros((3, 3, 8, 8), np.uint8))
    np.save(wide / "y.npy", np.zeros(3, np.int64))
    meta = ["--meta", str(described)]
    cases = [
        ([str(tmp_path / "absent.safetensors"), str(split), *meta], "absent.safetensors"),
        ([str(alone), str(split)], "model.json: no such file (pass the run's model.json"),
        ([str(flat), str(split), *meta], "a numpy file, not model.safetensors"),
        ([str(truncated), str(split), *meta], "cut.safetensors: not a valid safetensors file"),
        ([str(weights), str(digits)], "the importer's test split is"),
        ([str(weights), str(wide)], "rows are (3, 8, 8), the model (mobilenet) expects"),
        ([str(weights), str(split), "--meta", str(flat)], "model.npy: not JSON"),
    ]
    for args, message in cases:
        assert main(args) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1, captured.err
        assert captured.err.startswith("fasdl.evaluate: ") and message in captured.err
    # as a user runs it
    done = subprocess.run([sys.executable, "-m", "fasdl.evaluate", str(flat), str(split),
                           *meta], env=ENV, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and "model.npy holds only the flat" in done.stderr


def test_the_user_guides_five_lines_load_your_own_module(tmp_path: Path) -> None:
    """docs/user-guide.md, "Your trained model", run as written in a folder holding the
    user's nets/mine.py and a run's model.safetensors: the module computes what the trained
    one did."""
    section = (ROOT / "docs" / "user-guide.md").read_text().split(
        "### Your trained model", 1)[1]
    lines = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(lines.splitlines()) == 5 and "load_state_dict(load_file(" in lines
    mine = _user_net(tmp_path)
    torch.manual_seed(1)
    own = mine.build(10, (3, 32, 32))
    own(torch.rand(8, 3, 32, 32))  # batch-norm statistics move
    own.eval()
    export_files(own, tmp_path, {**CHECKPOINT_META, "model": "nets/mine.py:build",
                                 "input_shape": "3,32,32"},
                 workload("nets/mine.py:build", input_shape=[3, 32, 32], classes=10))
    inputs = torch.rand(4, 3, 32, 32)
    np.save(tmp_path / "inputs.npy", inputs.numpy())
    script = lines + ("import numpy, torch\nwith torch.no_grad():\n"
                      "    out = model(torch.from_numpy(numpy.load('inputs.npy')))\n"
                      "numpy.save('outputs.npy', out.numpy())\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    with torch.no_grad():
        assert np.array_equal(np.load(tmp_path / "outputs.npy"), own(inputs).numpy())
