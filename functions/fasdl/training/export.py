"""The exported model: ``model.safetensors`` and ``model.json``.

``model.npy`` holds only the flat trainable parameters, which is enough to continue K-REDUCE
but not to run a batch-norm network: its running statistics are buffers. ``model.safetensors``
(fasdl.training.safetensors_io, the safetensors format) holds every entry of the module's
``state_dict()`` under the module's own names, so ``safetensors.torch.load_file`` and
``load_state_dict`` put it into a freshly built copy of the same module, the user's own
included. ``model.json`` (:class:`ExportMeta`) says how to rebuild that module and prepare its
inputs as the workers did: the plan's model (a registry name or ``file.py:function``), input
shape, classes, normalization, augmentation and loss, the batch worker 0 evaluated in, the
parameter count, and (added by finalize) the run, its iterations and the sha256 of
``model.safetensors``.

Worker 0 makes both at the run's end, where torch is at hand (:func:`export_objects`: two
objects of the last checkpoint); finalize copies them without torch. Nothing is unpickled;
anything malformed or not fitting the network raises :class:`ExportError` naming the problem.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from fasdl.contract.fields import PlanError, is_int_at_least, is_number
from fasdl.contract.keys import EXPORT_OBJECTS
from fasdl.contract.user_code import ModelRef
from fasdl.contract.workload import (
    AUGMENTATIONS,
    MAX_INPUT_DIMS,
    NEEDS_NORMALIZATION,
    Workload,
)
from fasdl.training import augment, safetensors_io
from fasdl.training.networks import MODELS, InputShape, build_seeded_model
from fasdl.training.text_networks import TEXT_MODELS

EXPORT_FORMAT = 1
# Held-out evaluation batches (worker 0 and python -m fasdl.evaluate batch alike, so a run's
# final export gives the logits its summary counted): at most this, and never more than the
# worker's training batch, whose activations its memory size was planned for.
MAX_EVAL_BATCH = 1024
# model.safetensors' own __metadata__: what transformers writes for PyTorch state dicts
SAFETENSORS_METADATA = {"format": "pt"}
# per-channel {"mean": [...], "std": [...]} (the plan's workload.normalization)
Normalization = dict[str, list[float]]
_RUN_FIELDS = ("iterations", "sha256", "run_id")  # finalize adds them


class ExportError(ValueError):
    """The export is malformed or does not fit the network it names; the message says how."""


@dataclass(frozen=True)
class ExportMeta:
    """``model.json``: how to rebuild the module and prepare its inputs."""

    model: str
    classes: int
    input_shape: InputShape
    parameters: int  # trainable parameters (the length of model.npy)
    augmentation: str = "none"
    eval_batch: int = MAX_EVAL_BATCH  # the batch worker 0 evaluated in (evaluation_batch)
    loss: str = "cross_entropy"
    normalization: Normalization | None = None
    requirements: str | None = None  # workload.requirements: the packages the model imports
    iterations: int | None = None
    sha256: str | None = None
    run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": EXPORT_FORMAT, "model": self.model, "classes": self.classes,
            "input_shape": list(self.input_shape), "parameters": self.parameters,
            "augmentation": self.augmentation, "eval_batch": self.eval_batch,
            "loss": self.loss, "normalization": self.normalization}
        if self.requirements is not None:
            data["requirements"] = self.requirements
        data.update({name: getattr(self, name) for name in _RUN_FIELDS
                     if getattr(self, name) is not None})
        return data

    @property
    def input_normalization(self) -> augment.Normalization | None:
        """The dataset's per-channel statistics as fasdl.training.augment takes them."""
        return augment.normalization_from(self.normalization)

    @classmethod
    def from_dict(cls, data: object, source: str = "model.json") -> ExportMeta:
        if not isinstance(data, dict):
            raise ExportError(f"{source}: must be a JSON object, got {type(data).__name__}")
        if data.get("format") != EXPORT_FORMAT:
            raise ExportError(f"{source}: field 'format' must be {EXPORT_FORMAT}, got "
                              f"{data.get('format')!r}")
        model = _model(data.get("model"), source)
        for name in ("classes", "parameters", "eval_batch"):
            if not is_int_at_least(data.get(name), 1):
                raise ExportError(f"{source}: field {name!r} must be a positive integer, "
                                  f"got {data.get(name)!r}")
        augmentation, loss = data.get("augmentation"), data.get("loss")
        if augmentation not in AUGMENTATIONS:
            raise ExportError(f"{source}: field 'augmentation' must be one of "
                              f"{', '.join(AUGMENTATIONS)}, got {augmentation!r}")
        if not isinstance(loss, str) or not loss:
            raise ExportError(f"{source}: field 'loss' must be a loss name, got {loss!r}")
        normalization = _normalization(data.get("normalization"), source)
        if augmentation in NEEDS_NORMALIZATION and normalization is None:
            raise ExportError(f"{source}: field 'normalization' is required by augmentation "
                              f"{augmentation!r}")
        _check_run_fields(data, source)
        requirements = data.get("requirements")
        if requirements is not None and (not isinstance(requirements, str) or not requirements):
            raise ExportError(f"{source}: field 'requirements' must be a requirements file's "
                              f"path, got {requirements!r}")
        return cls(model, int(data["classes"]), _shape(model, data.get("input_shape"), source),
                   int(data["parameters"]), augmentation=str(augmentation),
                   eval_batch=int(data["eval_batch"]), loss=loss, normalization=normalization,
                   requirements=requirements, iterations=data.get("iterations"),
                   sha256=data.get("sha256"), run_id=data.get("run_id"))


def _model(value: object, source: str) -> str:
    try:
        ref = ModelRef.parse(value, "model")
    except PlanError:
        ref = None
    if ref is not None and (ref.code is not None or ref.name in MODELS):
        return ref.name
    raise ExportError(f"{source}: field 'model' must be a registry model "
                      f"({', '.join(sorted(MODELS))}) or path/to/file.py:function, got "
                      f"{value!r}")


def _shape(model: str, value: object, source: str) -> InputShape:
    dims = (2 if model in TEXT_MODELS else 3) if model in MODELS else None
    if not (isinstance(value, list) and all(is_int_at_least(n, 1) for n in value)
            and (len(value) == dims if dims else 1 <= len(value) <= MAX_INPUT_DIMS)
            and (model not in TEXT_MODELS or value[0] == 2)):
        wanted = {2: "[2, L] (token ids; attention mask)", 3: "[C, H, W]"}.get(
            dims or 0, f"1-{MAX_INPUT_DIMS} sizes")
        raise ExportError(f"{source}: field 'input_shape' must be {wanted} positive integers "
                          f"for {model}, got {value!r}")
    return tuple(int(n) for n in value)


def _normalization(value: object, source: str) -> Normalization | None:
    if value is None:
        return None
    if (not isinstance(value, dict) or set(value) != {"mean", "std"}
            or not all(isinstance(value[k], list) and value[k] and all(map(is_number, value[k]))
                       for k in ("mean", "std"))
            or len(value["mean"]) != len(value["std"])
            or not all(std > 0 for std in value["std"])):
        raise ExportError(f"{source}: field 'normalization' must be null or "
                          f'{{"mean": [...], "std": [...]}} (as many of each, std > 0), got '
                          f"{json.dumps(value)[:120]}")
    return {"mean": [float(n) for n in value["mean"]], "std": [float(n) for n in value["std"]]}


def _check_run_fields(data: Mapping[str, Any], source: str) -> None:
    """The fields finalize adds: absent (null) or well-formed."""
    for name in _RUN_FIELDS:
        value = data.get(name)
        fine = (value is None or (is_int_at_least(value, 0) if name == "iterations" else
                                  isinstance(value, str) and value != ""
                                  and (name != "sha256" or len(value) == 64)))
        if not fine:
            raise ExportError(f"{source}: field {name!r} is malformed: {value!r}")


def evaluation_batch(training_batch: int) -> int:
    """The held-out evaluation's batch: forward passes never need more memory than training."""
    return max(1, min(MAX_EVAL_BATCH, training_batch))


def trainable_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def state_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()``, parameters and buffers under the module's own names."""
    tensors: dict[str, torch.Tensor] = {}
    for name, value in model.state_dict().items():
        if not isinstance(value, torch.Tensor):
            raise ExportError(f"state dict entry {name!r} is a {type(value).__name__}, "
                              "not a tensor")
        tensors[name] = value.detach()
    return tensors


def safetensors_bytes(model: torch.nn.Module) -> bytes:
    """``model.safetensors``: the module's complete state."""
    try:
        return safetensors_io.save(state_tensors(model), None, SAFETENSORS_METADATA)
    except safetensors_io.SafetensorsError as error:
        raise ExportError(f"the model's state cannot be exported: {error}") from error


def describe(model: torch.nn.Module, meta: Mapping[str, str], workload: Workload) -> ExportMeta:
    """``model.json`` but the run fields, from a checkpoint manifest's meta (model,
    num_classes, input_shape as "C,H,W" (images) or "2,L" (text), augmentation, eval_batch) and
    the plan's workload (loss, normalization)."""
    try:
        shape = [int(n) for n in meta["input_shape"].split(",")]
        fields = {"format": EXPORT_FORMAT, "model": meta["model"],
                  "classes": int(meta["num_classes"]), "input_shape": shape,
                  "parameters": trainable_parameters(model),
                  "augmentation": meta.get("augmentation", "none"),
                  "eval_batch": int(meta.get("eval_batch", MAX_EVAL_BATCH)),
                  "loss": workload.loss, "normalization": workload.normalization,
                  "requirements": workload.requirements}
    except (KeyError, ValueError) as error:
        raise ExportError(f"checkpoint meta {dict(meta)!r} cannot describe an export: "
                          f"{error!r}") from error
    return ExportMeta.from_dict(fields, "the export's description")


def export_objects(model: torch.nn.Module, meta: Mapping[str, str],
                   workload: Workload) -> dict[str, Callable[[], bytes]]:
    """The run's last checkpoint's export objects (fasdl.contract.keys.EXPORT_OBJECTS), each
    made when it is written; finalize publishes them as model.safetensors and model.json."""
    description = describe(model, meta, workload)
    text = json.dumps(description.to_dict(), indent=1, sort_keys=True).encode()
    return {EXPORT_OBJECTS["model.safetensors"]: partial(safetensors_bytes, model),
            EXPORT_OBJECTS["model.json"]: lambda: text}


def load_meta(data: bytes | str, source: str = "model.json") -> ExportMeta:
    """:class:`ExportMeta` from ``model.json``'s text."""
    try:
        parsed = json.loads(data)
    except ValueError as error:
        raise ExportError(f"{source}: not JSON: {error}") from error
    return ExportMeta.from_dict(parsed, source)


def load_tensors(data: bytes | str, source: str = "model.safetensors"
                 ) -> dict[str, torch.Tensor]:
    """The state dict in ``model.safetensors`` (bytes or a path)."""
    try:
        return safetensors_io.load(data)[0]
    except (safetensors_io.SafetensorsError, OSError) as error:
        raise ExportError(f"{source}: not a valid safetensors file: {error}") from error


def check_state(model: torch.nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    """Raise ExportError unless ``tensors`` has exactly ``model``'s entries, shapes and dtypes.

    Integer buffers (``num_batches_tracked``, int64) must stay integers: load_state_dict
    would silently cast a float tensor into them, so dtypes are compared, not converted.
    """
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise ExportError(f"state dict does not fit the network: missing {missing[:5]}"
                          f"{'...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}"
                          f"{'...' if len(unexpected) > 5 else ''}")
    for name, wanted in expected.items():
        found = tensors[name]
        if found.dtype != wanted.dtype or tuple(found.shape) != tuple(wanted.shape):
            raise ExportError(f"entry {name!r} is {found.dtype} {tuple(found.shape)}, the "
                              f"network needs {wanted.dtype} {tuple(wanted.shape)}")


def build_exported(meta: ExportMeta, tensors: Mapping[str, torch.Tensor]) -> torch.nn.Module:
    """The network ``model.json`` names with the state loaded strictly, in eval mode."""
    # seeded: the fresh weights are overwritten anyway, and the caller's RNG is left alone
    try:
        model = build_seeded_model(meta.model, 0, meta.classes, meta.input_shape)
    except Exception as error:  # e.g. a text length past the model's positions; user code
        raise ExportError(f"model.json does not describe a buildable {meta.model}: "
                          f"{error}") from error
    check_state(model, tensors)
    parameters = trainable_parameters(model)
    if parameters != meta.parameters:
        raise ExportError(f"model.json says {meta.parameters} parameters, {meta.model} with "
                          f"{meta.classes} classes and input {meta.input_shape} has "
                          f"{parameters}")
    model.load_state_dict(dict(tensors), strict=True)
    model.eval()
    return model
