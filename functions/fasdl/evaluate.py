"""CLI: ``python -m fasdl.evaluate MODEL DATASET_DIR [--meta FILE] [--json]``.

Rebuilds the network a run exported (fasdl.training.export): ``MODEL`` is its
``model.safetensors``, described by the ``model.json`` beside it (or ``--meta FILE``); the
module is built as the plan named it (a registry model or the user's ``file.py:function``,
imported relative to the current folder, with the local layer of the packages model.json's
``requirements`` file pins when that file is here) and the state dict loaded strictly. Prints its
accuracy on ``DATASET_DIR/x.npy`` + ``y.npy`` (one split of the importer's output, e.g.
``data/cifar10/test``), and for a two-class model its Matthews correlation (``mcc``, CoLA's
metric). Inputs are scaled and normalised exactly as the workers do it
(fasdl.training.augment.evaluation_tensors, with the run's augmentation and normalization from
model.json) and batched as worker 0 batched its held-out evaluation (``eval_batch``), so the
accuracy (and MCC) of a run's export equals the one its summary reports for the last segment.
Exit 0 with the result (``--json``: one JSON line), or 2 with ``fasdl.evaluate: <why>``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from fasdl.contract.errors import DatasetError
from fasdl.contract.fields import PlanError
from fasdl.training.augment import AugmentationError, check_rows
from fasdl.training.data import ALLOWED_X_DTYPES, LABEL_DTYPE, X_DTYPE_NAMES
from fasdl.training.evaluation import Progress, confusion_of
from fasdl.training.export import (
    ExportError,
    ExportMeta,
    build_exported,
    load_meta,
    load_tensors,
)
from fasdl.training.model_check import check_requirements

EXIT_BAD_INPUT = 2
PROGRESS_EVERY_S = 2.0


def load_split(directory: Path, meta: ExportMeta) -> tuple[np.ndarray, np.ndarray]:
    """x and y of one split, memory-mapped and checked against the model's input."""
    paths = {name: directory / f"{name}.npy" for name in ("x", "y")}
    for path in paths.values():
        if not path.is_file():
            hint = (f" (the importer's test split is {directory / 'test'})"
                    if (directory / "test" / path.name).is_file() else "")
            raise DatasetError(f"{path}: no such file{hint}")
    x, y = (_mapped(paths["x"]), _mapped(paths["y"]))
    if x.dtype not in ALLOWED_X_DTYPES:
        raise DatasetError(f"{paths['x']}: dtype {x.dtype} not in {X_DTYPE_NAMES}")
    if y.dtype != LABEL_DTYPE or y.ndim != 1:
        raise DatasetError(f"{paths['y']}: expected 1-D int64 labels, got {y.dtype} {y.shape}")
    if len(x) != len(y) or len(y) == 0:
        raise DatasetError(f"{directory}: x has {len(x)} rows, y {len(y)}")
    if tuple(x.shape[1:]) != meta.input_shape:
        raise DatasetError(f"{paths['x']}: rows are {tuple(x.shape[1:])}, the model "
                           f"({meta.model}) expects {meta.input_shape}")
    check_rows(meta.augmentation, tuple(x.shape[1:]), x.dtype, meta.input_normalization)
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= meta.classes:
        raise DatasetError(f"{paths['y']}: labels span [{low}, {high}], the model has "
                           f"{meta.classes} classes")
    return x, y


def _mapped(path: Path) -> np.ndarray:
    # copy-on-write: a big split stays on disk, and torch still gets writable arrays
    try:
        array: np.ndarray = np.load(path, mmap_mode="c", allow_pickle=False)
    except (ValueError, OSError) as error:
        raise DatasetError(f"{path}: not a readable .npy array ({error})") from error
    return array


def _progress_printer() -> Progress:
    """Progress on stderr, at most every PROGRESS_EVERY_S (quiet for short evaluations)."""
    began = last = time.monotonic()

    def report(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S and done < total:
            last = now
            print(f"fasdl.evaluate: {done}/{total} samples ({now - began:.0f} s)",
                  file=sys.stderr, flush=True)

    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fasdl.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_file", type=Path, metavar="MODEL",
                        help="a run's model.safetensors")
    parser.add_argument("dataset_dir", type=Path, help="a folder with x.npy and y.npy")
    parser.add_argument("--meta", type=Path, metavar="FILE",
                        help="its model.json (default: the model.json beside MODEL)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    return parser


def load_model(model_file: Path, meta_file: Path) -> tuple[ExportMeta, torch.nn.Module]:
    """model.json's description and the module it names with model.safetensors' state."""
    if not meta_file.is_file():
        raise ExportError(f"{meta_file}: no such file (pass the run's model.json with --meta)")
    meta = load_meta(meta_file.read_bytes(), str(meta_file))
    data = model_file.read_bytes()
    if data[:6] == b"\x93NUMPY" or data[:2] == b"PK":
        raise ExportError(f"{model_file}: a numpy file, not model.safetensors (model.npy holds "
                          f"only the flat parameters; older runs' model.npz is not read)")
    if meta.requirements is not None and Path(meta.requirements).is_file():
        check_requirements(Path(meta.requirements))  # its local layer, as the run had it
    return meta, build_exported(meta, load_tensors(data, str(model_file)))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    meta_file = args.meta or args.model_file.with_name("model.json")
    try:
        meta, model = load_model(args.model_file, meta_file)
        x, y = load_split(args.dataset_dir, meta)
    except (ExportError, DatasetError, AugmentationError, PlanError, OSError) as error:
        print(f"fasdl.evaluate: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT
    confusion = confusion_of(model, x, y, meta.classes, _progress_printer(),
                             augmentation=meta.augmentation, batch=meta.eval_batch,
                             normalization=meta.input_normalization)
    correct, mcc = confusion.correct, confusion.mcc()
    result = {"accuracy": correct / len(y), "correct": correct, "samples": len(y),
              "mcc": mcc, "model": meta.model, "classes": meta.classes,
              "model_file": str(args.model_file), "meta_file": str(meta_file),
              "dataset": str(args.dataset_dir)}
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        matthews = "" if mcc is None else f", MCC {mcc:.4f}"
        print(f"accuracy {result['accuracy']:.4f} ({correct}/{len(y)} samples){matthews} of "
              f"{meta.model} on {args.dataset_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
