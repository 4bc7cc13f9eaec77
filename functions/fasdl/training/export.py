"""The exported model: a complete state dict (parameters and buffers) in one ``.npz``.

``model.npy`` holds only the flat trainable parameters, which is enough to continue K-REDUCE
but not to run a batch-norm network: its running statistics are buffers. The export keeps
every entry of ``model.state_dict()`` under its own name, plus one reserved entry,
:data:`META_NAME`, a uint8 array of UTF-8 JSON that says how to rebuild the network from the
registry (``fasdl.training.networks``): model name, classes, input shape ([C, H, W] for images, [2,
L]
for text: token ids and attention mask), parameter count, format.

No pickle anywhere: it is written with ``np.savez(..., allow_pickle=False)`` and read with
``np.load(..., allow_pickle=False)``; anything else (a truncated file, an object array, a
plain .npy, missing or inconsistent metadata) raises :class:`ExportError` naming the problem.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fasdl.contract.fields import is_int_at_least
from fasdl.contract.workload import AUGMENTATIONS
from fasdl.training.networks import MODELS, InputShape, build_seeded_model
from fasdl.training.text_networks import TEXT_MODELS

META_NAME = "__fasdl_meta__"
EXPORT_FORMAT = "fasdl-export"
EXPORT_VERSION = 1
# Held-out evaluation batches (worker 0 and python -m fasdl.evaluate batch alike, so a run's
# final export gives the logits its summary counted): at most this, and never more than the
# worker's training batch, whose activations its memory size was planned for.
MAX_EVAL_BATCH = 1024
# np.savez takes these as its own keyword arguments, so they cannot name an entry
_SAVEZ_ARGUMENTS = frozenset({"file", "allow_pickle"})


class ExportError(ValueError):
    """The export is malformed or does not fit the network it names; the message says how."""


@dataclass(frozen=True)
class ExportMeta:
    model: str
    num_classes: int
    input_shape: InputShape
    parameters: int  # trainable parameters (the length of model.npy)
    version: int = EXPORT_VERSION
    augmentation: str = "none"  # the plan's: evaluation normalises inputs as training did
    eval_batch: int = MAX_EVAL_BATCH  # the batch worker 0 evaluated in (evaluation_batch)

    def to_json(self) -> str:
        return json.dumps({"format": EXPORT_FORMAT, "version": self.version,
                           "model": self.model, "num_classes": self.num_classes,
                           "input_shape": list(self.input_shape),
                           "parameters": self.parameters,
                           "augmentation": self.augmentation,
                           "eval_batch": self.eval_batch}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ExportMeta:
        try:
            data = json.loads(text)
        except ValueError as error:
            raise ExportError(f"metadata {META_NAME!r} is not JSON: {error}") from error
        if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
            raise ExportError(f"metadata {META_NAME!r}: format must be {EXPORT_FORMAT!r}")
        if data.get("version") != EXPORT_VERSION:
            raise ExportError(f"metadata {META_NAME!r}: version {data.get('version')!r} is not "
                              f"supported (this reader knows {EXPORT_VERSION})")
        model = data.get("model")
        if not isinstance(model, str) or model not in MODELS:
            raise ExportError(f"metadata {META_NAME!r}: unknown model {model!r}; known: "
                              f"{', '.join(sorted(MODELS))}")
        shape = data.get("input_shape")
        is_text = model in TEXT_MODELS
        if not (isinstance(shape, list) and len(shape) == (2 if is_text else 3)
                and all(_positive_int(n) for n in shape) and (not is_text or shape[0] == 2)):
            wanted = "[2, L] (token ids; attention mask)" if is_text else "[C, H, W]"
            raise ExportError(f"metadata {META_NAME!r}: input_shape must be {wanted} positive "
                              f"integers for {model}, got {shape!r}")
        data.setdefault("eval_batch", MAX_EVAL_BATCH)  # exports before it batched at 1024
        for name in ("num_classes", "parameters", "eval_batch"):
            if not _positive_int(data.get(name)):
                raise ExportError(f"metadata {META_NAME!r}: {name} must be a positive integer, "
                                  f"got {data.get(name)!r}")
        augmentation = data.get("augmentation", "none")  # exports before it had none
        if augmentation not in AUGMENTATIONS:
            raise ExportError(f"metadata {META_NAME!r}: augmentation must be one of "
                              f"{', '.join(AUGMENTATIONS)}, got {augmentation!r}")
        return cls(model, int(data["num_classes"]), tuple(int(n) for n in shape),
                   int(data["parameters"]), augmentation=augmentation,
                   eval_batch=int(data["eval_batch"]))


def evaluation_batch(training_batch: int) -> int:
    """The held-out evaluation's batch: forward passes never need more memory than training."""
    return max(1, min(MAX_EVAL_BATCH, training_batch))


def _positive_int(value: object) -> bool:
    return is_int_at_least(value, 1)


def state_arrays(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """``model.state_dict()`` as numpy views of the tensors: no copy of a large model in the
    worker's memory; they are serialized at once, before the model changes again."""
    arrays: dict[str, np.ndarray] = {}
    for name, value in model.state_dict().items():
        if not isinstance(value, torch.Tensor):
            raise ExportError(f"state dict entry {name!r} is a {type(value).__name__}, "
                              "not a tensor")
        if name == META_NAME or name in _SAVEZ_ARGUMENTS:
            raise ExportError(f"state dict entry {name!r} collides with a reserved name")
        arrays[name] = value.detach().cpu().numpy()
    return arrays


def export_bytes(model: torch.nn.Module, *, model_name: str, num_classes: int,
                 input_shape: InputShape, augmentation: str = "none",
                 eval_batch: int = MAX_EVAL_BATCH) -> bytes:
    """The ``.npz`` bytes of ``model``'s complete state, with the metadata to rebuild it."""
    if model_name not in MODELS:
        raise ExportError(f"unknown model {model_name!r}; known: {', '.join(sorted(MODELS))}")
    parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    meta = ExportMeta(model_name, int(num_classes), tuple(int(n) for n in input_shape),
                      int(parameters), augmentation=augmentation, eval_batch=eval_batch)
    arrays = state_arrays(model)
    arrays[META_NAME] = np.frombuffer(meta.to_json().encode(), dtype=np.uint8)
    stream = io.BytesIO()
    np.savez(stream, allow_pickle=False, **arrays)
    return stream.getvalue()


def export_checkpoint_meta(model: torch.nn.Module, meta: Mapping[str, str]) -> bytes:
    """:func:`export_bytes` from a checkpoint manifest's meta (model, num_classes, input_shape
    as "C,H,W" or, for text, "2,L"; augmentation and eval_batch when the run set them),
    which the worker has built already."""
    try:
        shape = tuple(int(n) for n in meta["input_shape"].split(","))
        if len(shape) != (2 if meta["model"] in TEXT_MODELS else 3):
            raise ValueError(f"input_shape {meta['input_shape']!r} is not C,H,W (images) or "
                             "2,L (text models)")
        return export_bytes(model, model_name=meta["model"], num_classes=int(meta["num_classes"]),
                            input_shape=shape, augmentation=meta.get("augmentation", "none"),
                            eval_batch=int(meta.get("eval_batch", MAX_EVAL_BATCH)))
    except (KeyError, ValueError) as error:
        raise ExportError(f"checkpoint meta {dict(meta)!r} cannot describe an export: "
                          f"{error}") from error


def load_export(data: bytes) -> tuple[ExportMeta, dict[str, np.ndarray]]:
    """The metadata and the state dict arrays of an export; never unpickles."""
    try:
        loaded = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise ExportError(f"not a model export (.npz): {error}") from error
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ExportError("not a model export: a single .npy array (model.npy holds only the "
                          "flat parameters; the export is model.npz)")
    arrays: dict[str, np.ndarray] = {}
    with loaded:
        for name in loaded.files:
            try:
                arrays[name] = loaded[name]
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
                raise ExportError(f"entry {name!r} cannot be read without pickle or is "
                                  f"damaged: {error}") from error
    raw = arrays.pop(META_NAME, None)
    if raw is None:
        raise ExportError(f"no metadata entry {META_NAME!r}: not a FasDL model export")
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise ExportError(f"metadata {META_NAME!r} must be a 1-D uint8 array, got {raw.dtype} "
                          f"{raw.shape}")
    try:
        text = raw.tobytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ExportError(f"metadata {META_NAME!r} is not UTF-8: {error}") from error
    return ExportMeta.from_json(text), arrays


def check_state(model: torch.nn.Module, arrays: Mapping[str, np.ndarray]) -> None:
    """Raise ExportError unless ``arrays`` has exactly ``model``'s entries, shapes and dtypes.

    Integer buffers (``num_batches_tracked``, int64) must stay integers: load_state_dict
    would silently cast a float array into them, so dtypes are compared, not converted.
    """
    expected = model.state_dict()
    missing = sorted(set(expected) - set(arrays))
    unexpected = sorted(set(arrays) - set(expected))
    if missing or unexpected:
        raise ExportError(f"state dict does not fit the network: missing {missing[:5]}"
                          f"{'...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}"
                          f"{'...' if len(unexpected) > 5 else ''}")
    for name, tensor in expected.items():
        array = arrays[name]
        wanted = torch.empty(0, dtype=tensor.dtype).numpy().dtype
        if array.dtype != wanted or tuple(array.shape) != tuple(tensor.shape):
            raise ExportError(f"entry {name!r} is {array.dtype} {tuple(array.shape)}, the "
                              f"network needs {wanted} {tuple(tensor.shape)}")


def build_from_export(data: bytes | tuple[ExportMeta, Mapping[str, np.ndarray]]
                      ) -> torch.nn.Module:
    """The network named by the export with its state loaded strictly, in eval mode."""
    meta, arrays = load_export(data) if isinstance(data, bytes) else data
    # seeded: the fresh weights are overwritten anyway, and the caller's RNG is left alone
    try:
        model = build_seeded_model(meta.model, 0, meta.num_classes, meta.input_shape)
    except ValueError as error:  # e.g. a text length past the model's positions
        raise ExportError(f"metadata does not describe a buildable {meta.model}: "
                          f"{error}") from error
    check_state(model, arrays)
    parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if parameters != meta.parameters:
        raise ExportError(f"metadata says {meta.parameters} parameters, {meta.model} with "
                          f"{meta.num_classes} classes and input {meta.input_shape} has "
                          f"{parameters}")
    state: dict[str, Any] = {name: torch.from_numpy(np.array(array, copy=True))
                             for name, array in arrays.items()}
    model.load_state_dict(state, strict=True)
    model.eval()
    return model
