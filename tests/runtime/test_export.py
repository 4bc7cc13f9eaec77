"""The model export (fasdl.training.export: model.safetensors + model.json), worker 0's export
objects and finalize's copy of them (fasdl.run.results). The CLI: tests/runtime/test_evaluate.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.torch
import torch

from fasdl.contract.keys import EXPORT_OBJECTS
from fasdl.contract.settings import Settings
from fasdl.run import results
from fasdl.training.export import (
    MAX_EVAL_BATCH,
    ExportError,
    build_exported,
    describe,
    evaluation_batch,
    export_objects,
    load_meta,
    load_tensors,
)
from fasdl.training.networks import build_model
from tests.runtime.conftest import RESULTS, deployed_env
from tests.runtime.exported_model import (
    CHECKPOINT_META,
    EVAL_BATCH,
    MODEL,
    SHAPE,
    digits_with_head,
    trained_registry_model,
    workload,
)
from tests.runtime.kreduce_helpers import make_plan


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> torch.nn.Module:
    digits = tmp_path_factory.mktemp("digits") / "digits"
    digits_with_head(digits)
    return trained_registry_model(digits)


@pytest.fixture(scope="module")
def objects(model: torch.nn.Module) -> tuple[bytes, bytes]:
    """Worker 0's export objects: model.safetensors' bytes and the description's."""
    made = export_objects(model, CHECKPOINT_META, workload())
    assert list(made) == [EXPORT_OBJECTS["model.safetensors"], EXPORT_OBJECTS["model.json"]]
    weights, described = (source() for source in made.values())
    return weights, described


def test_the_export_holds_the_complete_state_and_rebuilds_bitwise(
        model: torch.nn.Module, objects: tuple[bytes, bytes]) -> None:
    weights, described = objects
    meta = load_meta(described)
    assert (meta.model, meta.classes, meta.input_shape, meta.eval_batch) == (
        MODEL, 10, SHAPE, EVAL_BATCH)
    assert (meta.loss, meta.normalization, meta.augmentation) == ("cross_entropy", None, "none")
    assert meta.parameters == sum(p.numel() for p in model.parameters())
    tensors = load_tensors(weights)
    assert set(tensors) == set(model.state_dict())
    tracked = [name for name in tensors if name.endswith("num_batches_tracked")]
    assert tracked and all(tensors[n].dtype == torch.int64 and int(tensors[n]) == 3
                           for n in tracked)
    assert any(name.endswith("running_var") for name in tensors)
    rebuilt = build_exported(meta, tensors)
    assert not rebuilt.training
    for name, tensor in model.state_dict().items():
        assert torch.equal(rebuilt.state_dict()[name], tensor), name
    inputs = torch.rand(16, *SHAPE)
    model.eval()
    with torch.no_grad():
        assert torch.equal(rebuilt(inputs), model(inputs))
    model.train()


def test_plain_torch_loads_it_into_a_fresh_registry_module(
        model: torch.nn.Module, objects: tuple[bytes, bytes], tmp_path: Path) -> None:
    """docs/user-guide.md, "Your trained model": safetensors' own loader and
    load_state_dict, no FasDL code but the registry's builder."""
    (tmp_path / "model.safetensors").write_bytes(objects[0])
    fresh = build_model(MODEL, 10, SHAPE)
    fresh.load_state_dict(safetensors.torch.load_file(str(tmp_path / "model.safetensors")))
    fresh.eval()
    model.eval()
    inputs = torch.rand(8, *SHAPE)
    with torch.no_grad():
        assert torch.equal(fresh(inputs), model(inputs))
    model.train()


def test_building_the_export_does_not_disturb_the_global_rng(
        objects: tuple[bytes, bytes]) -> None:
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    build_exported(load_meta(objects[1]), load_tensors(objects[0]))
    assert torch.equal(torch.rand(4), expected)


def _changed(described: bytes, **changes: Any) -> bytes:
    fields = {**json.loads(described), **changes}
    return json.dumps({k: v for k, v in fields.items() if v != "DROP"}).encode()


@pytest.mark.parametrize(("changes", "message"), [
    ({"format": 2}, "field 'format' must be 1, got 2"),
    ({"model": "resnet1000"}, "field 'model' must be a registry model"),
    ({"model": "../x.txt:build"}, "field 'model' must be a registry model"),
    ({"input_shape": [1, 8]}, r"field 'input_shape' must be \[C, H, W\]"),
    ({"classes": 0}, "field 'classes' must be a positive integer"),
    ({"eval_batch": True}, "field 'eval_batch' must be a positive integer"),
    ({"parameters": "DROP"}, "field 'parameters' must be a positive integer"),
    ({"augmentation": "mixup"}, "field 'augmentation' must be one of"),
    ({"augmentation": "normalize"}, "field 'normalization' is required by augmentation"),
    ({"normalization": {"mean": [0.5], "std": [0.0]}}, "field 'normalization' must be null"),
    ({"normalization": {"mean": [0.5, 0.5], "std": [1.0]}}, "field 'normalization' must"),
    ({"loss": 3}, "field 'loss' must be a loss name"),
    ({"sha256": "abc"}, "field 'sha256' is malformed"),
    ({"iterations": -1}, "field 'iterations' is malformed"),
    ({"requirements": ""}, "field 'requirements' must be a requirements file's path"),
])
def test_a_malformed_description_is_refused_by_field(objects: tuple[bytes, bytes],
                                                     changes: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(ExportError, match=f"^model.json: {message}"):
        load_meta(_changed(objects[1], **changes))


def test_a_description_for_a_users_model_takes_any_input_shape(
        objects: tuple[bytes, bytes]) -> None:
    meta = load_meta(_changed(objects[1], model="nets/mine.py:build", input_shape=[7, 3, 2, 2],
                              normalization={"mean": [1, 2], "std": [3, 4]}))
    assert meta.input_shape == (7, 3, 2, 2)
    assert meta.input_normalization == ((1.0, 2.0), (3.0, 4.0))
    with pytest.raises(ExportError, match="not JSON"):
        load_meta(b"{nope")
    with pytest.raises(ExportError, match="must be a JSON object, got list"):
        load_meta(b"[]")


def test_state_that_does_not_fit_the_named_network_is_refused(
        objects: tuple[bytes, bytes]) -> None:
    weights, described = objects
    meta, tensors = load_meta(described), load_tensors(weights)
    with pytest.raises(ExportError, match="does not fit the network: missing"):
        build_exported(load_meta(_changed(described, model="cnn")), tensors)
    name = next(n for n in tensors if n.endswith("num_batches_tracked"))
    floated = {**tensors, name: tensors[name].float()}
    with pytest.raises(ExportError, match=f"entry '{name}' is torch.float32 .* needs "
                                          "torch.int64"):
        build_exported(meta, floated)
    first = next(iter(tensors))
    wider = {**tensors, first: torch.zeros(*tensors[first].shape, 2)}
    with pytest.raises(ExportError, match=f"entry '{first}' is torch.float32 "):
        build_exported(meta, wider)
    with pytest.raises(ExportError, match=r"model\.json says 5 parameters"):
        build_exported(load_meta(_changed(described, parameters=5)), tensors)
    with pytest.raises(ExportError, match=r"model\.safetensors: not a valid safetensors file"):
        load_tensors(weights[:100])


def test_the_description_comes_from_the_checkpoint_meta_and_the_workload(
        model: torch.nn.Module) -> None:
    normalized = workload(normalization={"mean": [0.3], "std": [0.2]}, loss="mse")
    meta = describe(model, {**CHECKPOINT_META, "augmentation": "normalize"}, normalized)
    assert (meta.loss, meta.normalization, meta.augmentation) == (
        "mse", {"mean": [0.3], "std": [0.2]}, "normalize")
    assert meta.requirements is None and "requirements" not in meta.to_dict()
    pinned = describe(model, CHECKPOINT_META, workload(requirements="mine/requirements.txt"))
    assert load_meta(json.dumps(pinned.to_dict())).requirements == "mine/requirements.txt"
    with pytest.raises(ExportError, match="cannot describe an export"):
        describe(model, {k: v for k, v in CHECKPOINT_META.items() if k != "num_classes"},
                 workload())
    with pytest.raises(ExportError, match="field 'input_shape' must be"):
        describe(model, {**CHECKPOINT_META, "input_shape": "8,8"}, workload())


@pytest.mark.parametrize(("training", "expected"), [(1, 1), (32, 32), (1024, 1024),
                                                    (4096, MAX_EVAL_BATCH)])
def test_evaluation_batch_never_exceeds_the_training_batch(training: int,
                                                           expected: int) -> None:
    assert evaluation_batch(training) == expected


# ---- finalize: runs/<run_id>/model.safetensors + model.json ----------------------------------
PLAN = make_plan(2, 1, 2, 2, "bsp", samples=100)
WEIGHTS_OBJECT, META_OBJECT = EXPORT_OBJECTS["model.safetensors"], EXPORT_OBJECTS["model.json"]


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
                "objects": records, "meta": CHECKPOINT_META}
    monkeypatch.setattr(results, "final_model",
                        lambda *args, **kwargs: (manifest, objects["model"]))


RUN = {"run_id": "fin", "plan_key": "runs/fin/plan.json", "workers": [0, 1], "done": True,
       "segment": {"index": 1, "start_iteration": 4, "iterations": 0, "attempt": 0,
                   "resume_epoch": 1}}
FLAT = np.zeros(3, np.float32).tobytes()


def _read(s3: Any, key: str) -> bytes:
    data: bytes = s3.get_object(Bucket=RESULTS, Key=key)["Body"].read()
    return data


def test_finalize_publishes_the_export_and_its_description(
        monkeypatch: pytest.MonkeyPatch, s3: Any, objects: tuple[bytes, bytes]) -> None:
    weights, described = objects
    _final(monkeypatch, s3, {"model": FLAT, WEIGHTS_OBJECT: weights, META_OBJECT: described})
    out = results.write_final(s3, Settings.from_env(), RUN, "e")
    assert out["extra"]["export_key"] == "runs/fin/model.safetensors"
    assert _read(s3, "runs/fin/model.safetensors") == weights  # verbatim
    published = json.loads(_read(s3, "runs/fin/model.json"))
    assert published == {**json.loads(described), "iterations": 4, "run_id": "fin",
                         "sha256": hashlib.sha256(weights).hexdigest()}
    assert load_meta(_read(s3, "runs/fin/model.json")).sha256 == published["sha256"]
    summary = json.loads(_read(s3, out["summary_key"]))
    assert summary["export_key"] == "runs/fin/model.safetensors"
    assert out["model_key"] == "runs/fin/model.npy" and _read(s3, out["model_key"]) == FLAT


def test_finalize_without_export_objects_still_succeeds(monkeypatch: pytest.MonkeyPatch,
                                                        s3: Any) -> None:
    _final(monkeypatch, s3, {"model": FLAT})
    out = results.write_final(s3, Settings.from_env(), RUN, "e")
    assert out["extra"]["export_key"] is None
    listed = s3.list_objects_v2(Bucket=RESULTS, Prefix="runs/fin/model.")["Contents"]
    assert [item["Key"] for item in listed] == ["runs/fin/model.npy"]


@pytest.mark.parametrize(("objects_of", "tamper", "message"), [
    (lambda w, d: {WEIGHTS_OBJECT: w, META_OBJECT: d}, WEIGHTS_OBJECT,
     f"final checkpoint object 'fin/ckpt/{WEIGHTS_OBJECT}' does not match its manifest"),
    (lambda w, d: {WEIGHTS_OBJECT: w}, None, "holds only one of"),
    (lambda w, d: {WEIGHTS_OBJECT: w, META_OBJECT: b"[1]"}, None,
     "is not a JSON export description of format 1"),
])
def test_finalize_refuses_a_damaged_export(monkeypatch: pytest.MonkeyPatch, s3: Any,
                                           objects: tuple[bytes, bytes], objects_of: Any,
                                           tamper: str | None, message: str) -> None:
    _final(monkeypatch, s3, {"model": FLAT, **objects_of(*objects)}, tamper=tamper)
    with pytest.raises(results.ResultError, match=message):
        results.write_final(s3, Settings.from_env(), RUN, "e")
    assert "Contents" not in s3.list_objects_v2(Bucket=RESULTS, Prefix="runs/fin/model.js")
