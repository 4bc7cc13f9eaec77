"""Before anything is deployed: build the workload's model (and loss) from the plan the way a
worker will, on the meta device (no memory, no initialisation cost), and check it against the
plan. ``planner plan`` and ``cdk synth`` (app.py) call :func:`check_workload`; each problem is
one error naming the field."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

from fasdl.contract.fields import PlanError
from fasdl.contract.requirements import local_layer
from fasdl.contract.user_code import UserCodeError
from fasdl.contract.workload import Workload
from fasdl.training.networks import MODELS, build_model
from fasdl.training.user_code import check_signature, load_function

MB = 2**20
# model_mb is printed with four decimals in workloads; a typed-in or stale value is off by more
MODEL_MB_TOLERANCE = 5e-4


def parameter_mb_of(model: nn.Module) -> float:
    """S_m: the flat float32 vector of the trainable parameters, in MiB."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad) * 4 / MB


def build_on_meta(workload: Workload) -> nn.Module:
    """The workload's model on the meta device (its own code, or the registry's)."""
    if workload.input_shape is None or workload.classes is None:
        raise PlanError("workload.input_shape", "is required to build the model")
    with torch.device("meta"):
        return build_model(workload.model_ref, workload.classes, tuple(workload.input_shape))


def _check_output(model: nn.Module, workload: Workload) -> None:
    shape = [2, *(workload.input_shape or [])]
    try:
        with torch.device("meta"), torch.no_grad():
            output = model.eval()(torch.zeros(shape))
    except Exception as error:  # the user's forward on the input shape: name the field
        raise PlanError("workload.input_shape", f"the model's forward fails on a batch of "
                                                f"{shape}: {type(error).__name__}: "
                                                f"{error}") from None
    if not isinstance(output, torch.Tensor) or list(output.shape) != [2, workload.classes]:
        got = list(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise PlanError("workload.input_shape", f"the model maps a batch of {shape} to {got}, "
                                                f"expected [2, {workload.classes}] (logits per "
                                                f"class)")


def check_loss(workload: Workload) -> None:
    if workload.loss_ref.code is None:
        return
    factory = load_function(workload.loss_ref, "workload.loss")
    check_signature(factory, (), "workload.loss", "function() -> torch.nn.Module")
    if not callable(factory()):
        raise UserCodeError("workload.loss", f"{workload.loss} must return a callable "
                                             f"loss(logits, labels)")


def check_requirements(file: Path) -> None:
    """The requirements file is there, holds exact pins, and pip installs them: their local
    layer (built once) goes first on sys.path, so the model builds here with the packages a
    worker will import from its layer, not with whatever this environment has installed."""
    python = str(local_layer(file) / "python")  # its pins are read (and refused) there
    if python not in sys.path:
        sys.path.insert(0, python)


def check_workload(workload: Workload) -> float | None:
    """Check what can be checked before a deployment; returns the model's S_m in MiB when the
    workload states its input shape and classes (a model of one's own must; a registry model
    may, and is then held to them too); None for the paper's registry workloads."""
    check_loss(workload)
    if workload.requirements is not None:
        check_requirements(Path(workload.requirements))
    if workload.model_ref.code is None:
        if workload.model not in MODELS:
            raise PlanError("workload.model", f"unknown model {workload.model!r}; known: "
                                              f"{', '.join(sorted(MODELS))}, or "
                                              f"path/to/file.py:function")
        if workload.input_shape is None or workload.classes is None:
            return None  # the paper's workloads: model_mb is the paper's (1000 classes)
    try:
        model = build_on_meta(workload)
    except (UserCodeError, PlanError):
        raise
    except Exception as error:  # the user's builder raised: name the field and why
        raise UserCodeError("workload.model", f"building {workload.model} failed: "
                                              f"{type(error).__name__}: {error}") from None
    _check_output(model, workload)
    model_mb = parameter_mb_of(model)
    if abs(model_mb - workload.model_mb) > MODEL_MB_TOLERANCE:
        raise PlanError("workload.model_mb", f"must be {model_mb:.4f} (the model's float32 "
                                             f"parameters in MiB), got {workload.model_mb}; "
                                             f"python -m planner workload new computes it")
    return model_mb
