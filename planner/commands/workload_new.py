"""``python -m planner workload new``: a workload for a model and a dataset of your own.

It builds the model (``--model FILE.py:function`` or a registry name) on the meta device with
the dataset's input shape and class count, and writes a workload JSON with what it measured:
``model_mb`` from the module, ``samples`` and ``dataset_mb`` from the dataset folder (the output
of ``python -m fasdl.datasets``: ``DIR/train/{x,y}.npy`` and its ``meta.json``), the dataset's
normalisation, and no compute coefficients. ``planner plan`` refuses it until a profile adds
them; the command says how (``python -m local profile --workload FILE``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fasdl.contract.fields import PlanError
from fasdl.contract.user_code import UserCodeError
from fasdl.contract.workload import Workload
from planner.commands.cli_inputs import CliError, check_writable, write_atomically
from planner.model.inputs.recipe import Recipe

MB = 2**20
DEFAULT_AUGMENTATION = {"images": "images", "arrays": "normalize", "text": "none"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True,
                        help="path/to/file.py:function (a builder of num_classes, input_shape) "
                             "or a registry name")
    parser.add_argument("--dataset", required=True, type=Path,
                        help="the importer's output folder (train/ and test/) or its train/")
    parser.add_argument("--input-shape", type=int, nargs="+", metavar="N",
                        help="the rows' shape, e.g. 3 32 32 (default: the dataset's)")
    parser.add_argument("--name", help="workload name (default: the dataset folder's name)")
    parser.add_argument("--dataset-key", help="the dataset's key prefix in the datasets "
                                              "bucket (default datasets/<name>)")
    parser.add_argument("--loss", default="cross_entropy",
                        help="cross_entropy (default), mse, bce or path/to/file.py:function")
    parser.add_argument("--initial-weights", help="a .safetensors key in the datasets bucket")
    parser.add_argument("--requirements", help="a pip requirements file (exact pins) of the "
                                               "packages your code imports beside torch and "
                                               "numpy; the layer of their wheels is built by "
                                               "layers/torch/requirements_layer.py")
    parser.add_argument("--augmentation", help="none, cifar, images or normalize (default: "
                                               "images for images, normalize for arrays)")
    parser.add_argument("--out", help="where to write the workload (default <name>.json)")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")


def _train_folder(dataset: Path) -> Path:
    for folder in (dataset / "train", dataset):
        if (folder / "x.npy").is_file() and (folder / "y.npy").is_file():
            return folder
    raise CliError("--dataset", f"{dataset} holds neither train/x.npy and train/y.npy nor "
                                f"x.npy and y.npy (python -m fasdl.datasets writes them)")


def _dataset_facts(train: Path) -> dict[str, Any]:
    """Rows, row shape, classes, size and statistics, from meta.json where the importer wrote
    one, else from the arrays' headers and labels."""
    x = np.load(train / "x.npy", mmap_mode="r", allow_pickle=False)
    y = np.load(train / "y.npy", mmap_mode="r", allow_pickle=False)
    meta_file = train / "meta.json"
    meta: dict[str, Any] = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    size = (train / "x.npy").stat().st_size + (train / "y.npy").stat().st_size
    classes = meta.get("classes") or (int(np.max(y)) + 1 if len(y) else 0)
    normalization = ({"mean": meta["mean"], "std": meta["std"]}
                     if meta.get("mean") is not None and meta.get("std") is not None else None)
    return {"samples": int(x.shape[0]), "shape": [int(n) for n in x.shape[1:]],
            "classes": int(classes), "dataset_mb": round(size / MB, 4),
            "normalization": normalization, "kind": meta.get("kind")}


def _input_shape(args: argparse.Namespace, facts: dict[str, Any]) -> list[int]:
    if args.input_shape is None:
        return list(facts["shape"])
    if list(args.input_shape) != facts["shape"]:
        raise CliError("--input-shape", f"the dataset's rows are {facts['shape']}, "
                                        f"got {list(args.input_shape)}")
    return list(args.input_shape)


def _model_mb(workload: Workload) -> float:
    """S_m of the model, built on the meta device (torch is imported here only)."""
    from fasdl.training.model_check import (
        build_on_meta,
        check_loss,
        check_requirements,
        parameter_mb_of,
    )

    if workload.requirements is not None:  # a PlanError naming workload.requirements
        check_requirements(Path(workload.requirements))
    try:
        check_loss(workload)
        return round(parameter_mb_of(build_on_meta(workload)), 4)
    except UserCodeError as error:
        raise CliError("--model" if error.field == "workload.model" else "--loss",
                       str(error)) from error
    except Exception as error:  # the user's builder failed: say so, naming the flag
        raise CliError("--model", f"building {workload.model} failed: "
                                  f"{type(error).__name__}: {error}") from error


def build_workload(args: argparse.Namespace) -> dict[str, Any]:
    facts = _dataset_facts(_train_folder(args.dataset))
    name = args.name or args.dataset.resolve().name
    draft = Workload(name=name, model=args.model,
                     dataset=args.dataset_key or f"datasets/{name}", samples=facts["samples"],
                     dataset_mb=facts["dataset_mb"], model_mb=1.0,
                     input_shape=_input_shape(args, facts), classes=facts["classes"],
                     loss=args.loss, initial_weights=args.initial_weights,
                     normalization=facts["normalization"], requirements=args.requirements)
    augmentation = args.augmentation or (
        DEFAULT_AUGMENTATION.get(facts["kind"] or "", "none") if facts["normalization"]
        else "none")
    try:
        draft.validate()
        recipe = Recipe(augmentation=augmentation)
        workload = Workload(**{**asdict(draft), "model_mb": _model_mb(draft)})
        workload.validate()
    except PlanError as error:
        flag = "--" + error.field.split(".")[-1].replace("_", "-")
        raise CliError(flag if flag != "--augmentation" else "--augmentation",
                       str(error)) from error
    data = {key: value for key, value in asdict(workload).items() if value is not None}
    return {**data, "recipe": asdict(recipe),
            "notes": "written by python -m planner workload new; not profiled yet"}


def command_workload(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    workload = build_workload(args)
    out = args.out or f"{workload['name']}.json"
    check_writable("--out", out)
    write_atomically("--out", out, json.dumps(workload, indent=2) + "\n")
    profile = f"python -m local profile --workload {out}"
    if args.json:
        emit(json.dumps({"status": "ok", "out": out, "workload": workload,
                         "next": profile}))
    else:
        emit(f"wrote {out}: {workload['model']} ({workload['model_mb']} MB of parameters), "
             f"{workload['samples']} samples of {workload['input_shape']}, "
             f"{workload['classes']} classes")
        emit(f"next: profile it ({profile}), then plan with the workload the profile writes")
    return 0

