"""A workload to be profiled (``python -m planner workload new`` wrote it): the fields a fitted
profile of it keeps as they were. ``python -m local profile --workload`` and ``python -m planner
fit --workload`` (samples from the profiling state machine on AWS) both read it here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fasdl.contract.workload import USER_FIELDS

# What the fit keeps from the workload file; it adds the coefficients a, b, m, k, c
KEPT_FIELDS = ("model", "model_mb", *USER_FIELDS, "recipe", "dataset", "samples", "dataset_mb")
REQUIRED_FIELDS = ("name", "model", "input_shape", "classes", "dataset", "samples", "dataset_mb",
                   "model_mb")


def read_base_workload(path: Path) -> dict[str, Any]:
    """The workload file's fields; raises ValueError naming the file and a missing field."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    missing = [name for name in REQUIRED_FIELDS if name not in data]
    if missing:
        raise ValueError(f"{path}: field '{missing[0]}' is missing (python -m planner "
                         f"workload new writes it)")
    return data


def kept_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {name: data[name] for name in KEPT_FIELDS if name in data}
