"""A small trained batch-norm network and its export (model.safetensors + model.json) as a run
leaves them, for tests/runtime/test_export.py and test_evaluate.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from fasdl.contract.workload import Workload
from fasdl.datasets import build_digits
from fasdl.training.augment import evaluation_tensors, to_tensors
from fasdl.training.export import export_objects
from fasdl.training.networks import build_seeded_model

SHAPE = (1, 8, 8)
MODEL = "mobilenet"  # the smallest registry network with batch norm
EVAL_BATCH = 32  # the export's: worker 0 trained at batch 32; the split has 150 rows
# a checkpoint manifest's meta, as fasdl.run.segment_runner writes it
CHECKPOINT_META = {"model": MODEL, "num_classes": "10", "input_shape": "1,8,8",
                   "parameters": "0", "augmentation": "none", "eval_batch": str(EVAL_BATCH)}


def workload(model: str = MODEL, **fields: object) -> Workload:
    return Workload(name="digits", model=model, dataset="datasets/digits", samples=1437,
                    dataset_mb=0.1, model_mb=0.1, **fields)  # type: ignore[arg-type]


def digits_with_head(out: Path) -> Path:
    """The digits importer's output in ``out``; returns ``out/test-head``, the first 150 test
    rows (a few batches' worth keeps evaluations quick)."""
    build_digits(out)
    folder = out / "test-head"
    folder.mkdir()
    for name in ("x", "y"):
        np.save(folder / f"{name}.npy", np.load(out / "test" / f"{name}.npy")[:150])
    return folder


def trained(model: torch.nn.Module, digits: Path, steps: int = 3) -> torch.nn.Module:
    """``model`` after a few SGD steps: batch-norm statistics no longer the defaults."""
    x = np.load(digits / "train" / "x.npy")
    y = np.load(digits / "train" / "y.npy")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    for start in range(0, steps * 32, 32):
        features, labels = to_tensors(x[start:start + 32], y[start:start + 32])
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(features), labels).backward()
        optimizer.step()
    return model


def trained_registry_model(digits: Path) -> torch.nn.Module:
    torch.manual_seed(0)
    return trained(build_seeded_model(MODEL, 7, 10, SHAPE), digits)


def export_files(model: torch.nn.Module, folder: Path, meta: dict[str, str] | None = None,
                 plan_workload: Workload | None = None) -> tuple[Path, Path]:
    """model.safetensors and model.json as finalize publishes them (worker 0's export
    objects, plus the run fields finalize adds)."""
    folder.mkdir(parents=True, exist_ok=True)
    objects = export_objects(model, meta or CHECKPOINT_META, plan_workload or workload())
    weights, described = (source() for source in objects.values())
    description = {**json.loads(described), "iterations": 3, "run_id": "test",
                   "sha256": hashlib.sha256(weights).hexdigest()}
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "model.json").write_text(json.dumps(description))
    return folder / "model.safetensors", folder / "model.json"


def predicted(model: torch.nn.Module, x: np.ndarray, y: np.ndarray,
              batch: int = EVAL_BATCH) -> np.ndarray:
    """What worker 0's evaluation predicts, batch by batch."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        found = np.concatenate([
            model(evaluation_tensors(x[start:start + batch], y[start:start + batch],
                                     "none")[0]).argmax(1).numpy()
            for start in range(0, len(y), batch)])
    model.train(was_training)
    return found
