"""The model export (fasdl.training.export), its CLI (python -m fasdl.evaluate) and finalize's
copy."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fasdl.contract.settings import Settings
from fasdl.datasets import build_digits
from fasdl.evaluate import main
from fasdl.run import results
from fasdl.training import evaluation
from fasdl.training.augment import evaluation_tensors
from fasdl.training.data import to_tensors
from fasdl.training.export import (
    MAX_EVAL_BATCH,
    META_NAME,
    ExportError,
    build_from_export,
    evaluation_batch,
    export_bytes,
    export_checkpoint_meta,
    load_export,
)
from fasdl.training.networks import build_seeded_model
from tests.runtime.conftest import RESULTS, deployed_env
from tests.runtime.test_kreduce import make_plan

ROOT = Path(__file__).resolve().parents[2]
SHAPE = (1, 8, 8)
MODEL = "mobilenet"  # the smallest registry network with batch norm
EVAL_BATCH = 32  # the export's: worker 0 trained at batch 32; the split has 150 rows


def _npz(arrays: dict[str, np.ndarray], *, allow_pickle: bool = False) -> bytes:
    stream = io.BytesIO()
    np.savez(stream, allow_pickle=allow_pickle, **arrays)
    return stream.getvalue()


def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


def _with_meta(data: bytes, **changes: Any) -> bytes:
    """``data`` re-packed with its metadata fields changed."""
    meta, arrays = load_export(data)
    fields = {**json.loads(meta.to_json()), **changes}
    return _npz({**arrays, META_NAME: np.frombuffer(json.dumps(fields).encode(), np.uint8)})


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("digits") / "digits"
    build_digits(out)
    return out


@pytest.fixture(scope="module")
def split(digits: Path) -> Path:
    """The first rows of the digits test split (a few batches' worth keeps the CLI quick)."""
    folder = digits / "test-head"
    folder.mkdir()
    for name in ("x", "y"):
        np.save(folder / f"{name}.npy", np.load(digits / "test" / f"{name}.npy")[:150])
    return folder


@pytest.fixture(scope="module")
def trained(digits: Path) -> torch.nn.Module:
    """A batch-norm network after a few steps: running statistics no longer the defaults."""
    torch.manual_seed(0)
    model = build_seeded_model(MODEL, 7, 10, SHAPE)
    x = np.load(digits / "train" / "x.npy")
    y = np.load(digits / "train" / "y.npy")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    for start in range(0, 3 * 32, 32):
        features, labels = to_tensors(x[start:start + 32], y[start:start + 32])
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(features), labels).backward()
        optimizer.step()
    return model


@pytest.fixture(scope="module")
def exported(trained: torch.nn.Module) -> bytes:
    return export_bytes(trained, model_name=MODEL, num_classes=10, input_shape=SHAPE,
                        eval_batch=EVAL_BATCH)


def test_round_trip_keeps_buffers_and_gives_bitwise_equal_outputs(
        trained: torch.nn.Module, exported: bytes) -> None:
    meta, arrays = load_export(exported)
    assert (meta.model, meta.num_classes, meta.input_shape) == (MODEL, 10, SHAPE)
    assert meta.parameters == sum(p.numel() for p in trained.parameters())
    assert set(arrays) == set(trained.state_dict())
    tracked = [name for name in arrays if name.endswith("num_batches_tracked")]
    assert tracked and all(arrays[n].dtype == np.int64 and int(arrays[n]) == 3 for n in tracked)
    assert any(name.endswith("running_var") for name in arrays)
    rebuilt = build_from_export(exported)
    assert not rebuilt.training
    for name, tensor in trained.state_dict().items():
        assert torch.equal(rebuilt.state_dict()[name], tensor), name
    trained.eval()
    inputs = torch.rand(16, *SHAPE)
    with torch.no_grad():
        assert torch.equal(rebuilt(inputs), trained(inputs))
    trained.train()


def test_export_does_not_disturb_the_global_rng(exported: bytes) -> None:
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    build_from_export(exported)
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.parametrize(("damage", "message"), [
    (lambda data: data[:len(data) // 2], "not a model export"),
    (lambda data: b"", "not a model export"),
    (lambda data: _npz({**load_export(data)[1], "planted": np.array([{"a": 1}], dtype=object),
                        META_NAME: np.frombuffer(load_export(data)[0].to_json().encode(),
                                                 np.uint8)}, allow_pickle=True),
     "entry 'planted' cannot be read without pickle"),
    (lambda data: _npz(load_export(data)[1]), f"no metadata entry '{META_NAME}'"),
    (lambda data: _with_meta(data, model="resnet1000"), "unknown model 'resnet1000'"),
    (lambda data: _with_meta(data, version=99), "version 99 is not supported"),
    (lambda data: _with_meta(data, input_shape=[1, 8]), "input_shape must be"),
    (lambda data: _with_meta(data, eval_batch=0), "eval_batch must be a positive integer"),
    (lambda data: _npz({**load_export(data)[1], META_NAME: np.frombuffer(b"{nope", np.uint8)}),
     "is not JSON"),
    (lambda data: np.lib.format.magic(1, 0) + b"junk", "not a model export"),
])
def test_malformed_exports_are_refused_by_name(exported: bytes, damage: Any,
                                               message: str) -> None:
    with pytest.raises(ExportError, match=message):
        build_from_export(damage(exported))


def test_state_that_does_not_fit_the_named_network_is_refused(exported: bytes) -> None:
    meta, arrays = load_export(exported)
    with pytest.raises(ExportError, match="does not fit the network: missing"):
        build_from_export(_with_meta(exported, model="cnn"))
    name = next(n for n in arrays if n.endswith("num_batches_tracked"))
    floated = {**arrays, name: arrays[name].astype(np.float32)}
    with pytest.raises(ExportError, match=f"entry '{name}' is float32 .* needs int64"):
        build_from_export((meta, floated))
    with pytest.raises(ExportError, match="metadata says 5 parameters"):
        build_from_export(_with_meta(exported, parameters=5))
    with pytest.raises(ExportError, match=r"a single \.npy array"):
        load_export(_npy(arrays[name]))
    with pytest.raises(ExportError, match="unknown model"):
        export_bytes(torch.nn.Linear(2, 2), model_name="linear", num_classes=2,
                     input_shape=(1, 1, 2))


def test_checkpoint_meta_describes_the_export(trained: torch.nn.Module) -> None:
    meta = {"model": MODEL, "num_classes": "10", "input_shape": "1,8,8", "parameters": "0"}
    built, _ = load_export(export_checkpoint_meta(trained, meta))
    assert (built.model, built.num_classes, built.input_shape) == (MODEL, 10, SHAPE)
    with pytest.raises(ExportError, match="cannot describe an export"):
        export_checkpoint_meta(trained, {**meta, "input_shape": "8,8"})


def _predicted(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    model.eval()
    with torch.no_grad():
        return np.concatenate([
            model(evaluation_tensors(x[start:start + EVAL_BATCH], y[start:start + EVAL_BATCH],
                                     "none")[0]).argmax(1).numpy()
            for start in range(0, len(y), EVAL_BATCH)])


def test_cli_reports_the_accuracy_worker_zero_computes(
        trained: torch.nn.Module, exported: bytes, split: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    model_file = tmp_path / "model.npz"
    model_file.write_bytes(exported)
    test = split
    x, y = np.load(test / "x.npy"), np.load(test / "y.npy")
    expected = float(np.mean(_predicted(trained, x, y) == y))  # as worker 0 batches it
    trained.train()
    assert main([str(model_file), str(test), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["accuracy"] == expected and result["samples"] == len(y)
    assert result["model"] == MODEL
    assert main([str(model_file), str(test)]) == 0
    assert f"accuracy {expected:.4f} ({result['correct']}/{len(y)} samples)" in (
        capsys.readouterr().out)


def test_cli_batches_as_the_export_says(exported: bytes, split: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker 0 evaluates in batches of at most its training batch (its memory was planned
    for that batch's activations); the CLI batches the same way, so the logits are the same."""
    batches: list[int] = []
    original = evaluation.add_batch

    def counted(confusion: Any, model: torch.nn.Module, x: np.ndarray, y: np.ndarray,
                augmentation: str) -> None:
        batches.append(len(y))
        original(confusion, model, x, y, augmentation)

    monkeypatch.setattr(evaluation, "add_batch", counted)
    model_file = tmp_path / "model.npz"
    model_file.write_bytes(exported)
    assert main([str(model_file), str(split), "--json"]) == 0
    assert batches == [32, 32, 32, 32, 22]
    # an export from before eval_batch was recorded evaluates at the old fixed batch
    old_fields = json.loads(load_export(exported)[0].to_json())
    del old_fields["eval_batch"]
    _, arrays = load_export(exported)
    old = _npz({**arrays, META_NAME: np.frombuffer(json.dumps(old_fields).encode(), np.uint8)})
    assert load_export(old)[0].eval_batch == MAX_EVAL_BATCH


@pytest.mark.parametrize(("training", "expected"), [(1, 1), (32, 32), (1024, 1024),
                                                    (4096, MAX_EVAL_BATCH)])
def test_evaluation_batch_never_exceeds_the_training_batch(training: int,
                                                           expected: int) -> None:
    assert evaluation_batch(training) == expected


def test_cli_bad_input_is_one_line_and_exit_2(exported: bytes, digits: Path, split: Path,
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    model_file = tmp_path / "model.npz"
    model_file.write_bytes(exported)
    (tmp_path / "model.npy").write_bytes(_npy(np.zeros(4, np.float32)))
    wide = tmp_path / "wide"
    wide.mkdir()
    np.save(wide / "x.npy", np.zeros((3, 3, 8, 8), np.uint8))
    np.save(wide / "y.npy", np.zeros(3, np.int64))
    cases = [
        ([str(tmp_path / "absent.npz"), str(split)], "absent.npz"),
        ([str(model_file), str(digits)], "the importer's test split is"),
        ([str(model_file), str(wide)], "rows are (3, 8, 8), the model (mobilenet) expects"),
    ]
    for args, message in cases:
        assert main(args) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1, captured.err
        assert captured.err.startswith("fasdl.evaluate: ") and message in captured.err
    # as a user runs it
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'functions'}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, "-m", "fasdl.evaluate", str(tmp_path / "model.npy"),
                           str(split)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and "a single .npy array" in done.stderr, done.stderr


# ---- finalize: runs/<run_id>/model.npz ------------------------------------------------------
PLAN = make_plan(2, 1, 2, 2, "bsp", samples=100)


@pytest.fixture
def s3_env() -> dict[str, str]:  # tests/runtime/conftest.py's s3, deployed with PLAN
    return deployed_env(PLAN)


def _final(monkeypatch: pytest.MonkeyPatch, s3: Any, objects: dict[str, bytes],
           tamper: str | None = None) -> None:
    """A final checkpoint listing ``objects`` (fasdl.run.checkpoint's manifest format), handed to
    write_final whichever way it locates the manifest."""
    records = {}
    for name, data in objects.items():
        key = f"fin/ckpt/{name}"
        s3.put_object(Bucket=RESULTS, Key=f"runs/{key}",
                      Body=data + (b"!" if name == tamper else b""))
        records[name] = {"key": key, "sha256": hashlib.sha256(data).hexdigest(),
                         "size": len(data)}
    manifest = {"format": 1, "run": "fin", "resume_iteration": 4, "attempt": 0, "workers": 2,
                "objects": records, "meta": {"model": MODEL, "num_classes": "10",
                                             "input_shape": "1,8,8", "parameters": "3"}}
    monkeypatch.setattr(results, "final_model",
                        lambda *args, **kwargs: (manifest, objects["model"]))


RUN = {"run_id": "fin", "plan_key": "runs/fin/plan.json", "workers": [0, 1], "done": True,
       "segment": {"index": 1, "start_iteration": 4, "iterations": 0, "attempt": 0,
                   "resume_epoch": 1}}


def test_finalize_publishes_the_export_verbatim(monkeypatch: pytest.MonkeyPatch, s3: Any,
                                                exported: bytes) -> None:
    _final(monkeypatch, s3, {"model": _npy(np.zeros(3, np.float32)), "export": exported})
    out = results.write_final(s3, Settings.from_env(), RUN, "e")
    assert out["extra"]["export_key"] == "runs/fin/model.npz"
    published = s3.get_object(Bucket=RESULTS, Key="runs/fin/model.npz")["Body"].read()
    assert published == exported
    summary = json.loads(s3.get_object(Bucket=RESULTS, Key=out["summary_key"])["Body"].read())
    assert summary["export_key"] == "runs/fin/model.npz"
    assert out["model_key"] == "runs/fin/model.npy"  # kept for older readers


def test_finalize_without_export_still_succeeds_and_checks_the_export_sum(
        monkeypatch: pytest.MonkeyPatch, s3: Any, exported: bytes) -> None:
    _final(monkeypatch, s3, {"model": _npy(np.zeros(3, np.float32))})
    out = results.write_final(s3, Settings.from_env(), RUN, "e")
    assert out["extra"]["export_key"] is None
    assert "Contents" not in s3.list_objects_v2(Bucket=RESULTS, Prefix="runs/fin/model.npz")
    _final(monkeypatch, s3, {"model": _npy(np.zeros(3, np.float32)), "export": exported},
           tamper="export")
    with pytest.raises(results.ResultError, match="final export 'fin/ckpt/export' does not"):
        results.write_final(s3, Settings.from_env(), RUN, "e")
