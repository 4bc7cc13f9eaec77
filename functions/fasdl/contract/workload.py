"""The plan's ``workload``: what is trained, on what data, from which initial weights.

``model`` is a model of the registry (fasdl.training.networks) or a reference to the user's own
code, ``path/to/file.py:function`` (both parsed by fasdl.contract.user_code.ModelRef): a
builder ``function(num_classes, input_shape) -> torch.nn.Module`` (fasdl.training.user_code
imports it; infra ships the file, and its package if it is one, with the functions). A
referenced model needs ``input_shape`` and ``classes``, so that the planner and the synth can
build it before anything is deployed.
``loss`` is ``cross_entropy`` (default), ``mse`` or ``bce`` (on one-hot targets), or a reference
``file.py:function`` to ``function() -> torch.nn.Module`` called as ``loss(logits, labels)``.
``initial_weights``: a safetensors file's key in the datasets bucket (fine-tuning).
``normalization``: per-channel ``mean`` and ``std`` of the dataset, from its importer's
``meta.json``; the ``images`` and ``normalize`` augmentations use them.
``requirements``: a pip requirements file (exact ``name==version`` pins) of the packages the
user's code imports beside the runtime's; a layer of their wheels is built for Lambda by
``layers/torch/requirements_layer.py`` and the synth checks it matches this file.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from fasdl.contract.fields import (
    DATASET_KEY,
    IDENTIFIER,
    Fail,
    PlanError,
    is_number,
    require_dataset_key,
    require_float,
    require_int,
    require_pattern,
    show,
)
from fasdl.contract.user_code import ModelRef

# fasdl.training.augment: none; cifar (crop, flip, CIFAR-10's statistics); images (crop, flip,
# the dataset's own statistics); normalize (the dataset's statistics only)
AUGMENTATIONS: tuple[str, ...] = ("none", "cifar", "images", "normalize")
NEEDS_NORMALIZATION: tuple[str, ...] = ("images", "normalize")
LOSSES: tuple[str, ...] = ("cross_entropy", "mse", "bce")
# path/to/requirements.txt, with the same path rules as a code reference
REQUIREMENTS_FILE = re.compile(r"^/?[A-Za-z0-9_.\-/]{1,255}\.txt\Z")
MAX_INPUT_DIMS = 4
# The optional fields of the user's own model and data, in the plan, in a profile and in a
# `planner workload new` file alike
USER_FIELDS: tuple[str, ...] = ("input_shape", "classes", "loss", "initial_weights",
                                "normalization", "requirements")
MAX_CLASSES = 100_000


def _require_weights_key(path: str, value: object, fail: Fail) -> None:
    key = require_dataset_key(path, value, fail)
    if not key.endswith(".safetensors") or not DATASET_KEY.fullmatch(key):
        raise fail(path, f"must be the datasets bucket key of a .safetensors file, got "
                              f"{show(key)}")


def _require_requirements(path: str, value: object, fail: Fail) -> None:
    file = require_pattern(path, value, REQUIREMENTS_FILE,
                           "the path of a pip requirements .txt file", fail)
    if ".." in file.split("/"):
        raise fail(path, f"the file's path must not contain '..', got {show(value)}")


def _require_shape(path: str, value: object, fail: Fail) -> list[int]:
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= MAX_INPUT_DIMS:
        raise fail(path, f"must be a list of 1-{MAX_INPUT_DIMS} sizes, e.g. [3, 32, 32], "
                              f"got {show(value)}")
    return [require_int(f"{path}[{index}]", size, 1, 100_000, fail=fail)
            for index, size in enumerate(value)]


def _require_normalization(path: str, value: object, shape: list[int] | None,
                           fail: Fail) -> None:
    """Per-channel statistics: one per channel of C x H x W rows; for feature vectors one per
    feature or one for all."""
    if not isinstance(value, dict) or set(value) != {"mean", "std"}:
        raise fail(path, f"must be an object with 'mean' and 'std' lists, got "
                              f"{show(value)}")
    for name in ("mean", "std"):
        numbers = value[name]
        if not isinstance(numbers, list) or not 1 <= len(numbers) <= 64 or not all(
                is_number(number) for number in numbers):
            raise fail(f"{path}.{name}", f"must be a list of 1-64 numbers, got "
                                              f"{show(numbers)}")
        low = 1e-6 if name == "std" else -1e6
        for index, number in enumerate(numbers):
            require_float(f"{path}.{name}[{index}]", number, low, 1e6, fail=fail)
    if len(value["mean"]) != len(value["std"]):
        raise fail(f"{path}.std", f"must have as many entries as mean "
                                       f"({len(value['mean'])}), got {len(value['std'])}")
    if shape is None:
        return
    # feature vectors: one pair per feature (the importers' statistics) or one for all
    wanted = {1, shape[0]} if len(shape) == 1 else {shape[0]}
    if len(value["mean"]) not in wanted:
        kinds = (f"1 or {shape[0]} entries (one for all features or one per feature"
                 if len(shape) == 1 else f"{shape[0]} entries (one per channel")
        raise fail(f"{path}.mean", f"must have {kinds} of input_shape {shape}), got "
                                   f"{len(value['mean'])}")


@dataclass(frozen=True)
class Workload:
    """What is trained. ``samples`` is D, ``dataset_mb`` S_d, ``model_mb`` S_m."""

    name: str
    model: str
    dataset: str
    samples: int
    dataset_mb: float
    model_mb: float
    input_shape: list[int] | None = None
    classes: int | None = None
    loss: str = "cross_entropy"
    initial_weights: str | None = None
    normalization: dict[str, Any] | None = None
    requirements: str | None = None

    def validate(self, prefix: str = "workload.", fail: Fail = PlanError) -> None:
        """Every field by the plan's rules; an error names ``prefix`` + the field (the plan's
        ``workload.samples``; a profile's own ``samples``) and is ``fail``'s (PlanError; a
        profile's ProfileError)."""
        require_pattern(f"{prefix}name", self.name, IDENTIFIER,
                        "an identifier of 1-64 letters, digits, '_', '.', '-'", fail)
        ModelRef.parse(self.model, f"{prefix}model", fail=fail)
        require_dataset_key(f"{prefix}dataset", self.dataset, fail)
        require_int(f"{prefix}samples", self.samples, 1, 10**10, fail=fail)
        require_float(f"{prefix}dataset_mb", self.dataset_mb, 0.0, 1e7, open_low=True,
                      fail=fail)
        require_float(f"{prefix}model_mb", self.model_mb, 0.0, 1e5, open_low=True, fail=fail)
        self._validate_user_fields(prefix, fail)

    def _validate_user_fields(self, prefix: str, fail: Fail) -> None:
        if self.input_shape is not None:
            _require_shape(f"{prefix}input_shape", self.input_shape, fail)
        if self.classes is not None:
            require_int(f"{prefix}classes", self.classes, 2, MAX_CLASSES, fail=fail)
        if ModelRef.parse(self.model, f"{prefix}model", fail=fail).code is not None:
            for name in ("input_shape", "classes"):
                if getattr(self, name) is None:
                    raise fail(f"{prefix}{name}", f"is required for a model of your own "
                                                  f"({self.model})")
        ModelRef.parse(self.loss, f"{prefix}loss", names=LOSSES, fail=fail)
        if self.initial_weights is not None:
            _require_weights_key(f"{prefix}initial_weights", self.initial_weights, fail)
        if self.normalization is not None:
            _require_normalization(f"{prefix}normalization", self.normalization,
                                   self.input_shape, fail)
        if self.requirements is not None:
            _require_requirements(f"{prefix}requirements", self.requirements, fail)

    def to_dict(self) -> dict[str, Any]:
        """The fields, the optional ones only where set: a plan without them reads (and
        takes the trigger's 4 KB environment) as before they existed."""
        data = asdict(self)
        for item in fields(self):
            if item.default is not MISSING and data[item.name] == item.default:
                del data[item.name]
        return data

    @property
    def model_ref(self) -> ModelRef:
        """The model, parsed (a registry name or the user's ``file.py:function``)."""
        return ModelRef.parse(self.model, "workload.model")

    @property
    def loss_ref(self) -> ModelRef:
        """The loss, parsed (one of LOSSES or the user's ``file.py:function``)."""
        return ModelRef.parse(self.loss, "workload.loss", names=LOSSES)
