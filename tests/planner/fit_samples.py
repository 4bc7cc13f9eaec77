"""Synthetic `planner fit` samples from known coefficients, and the fit command's arguments
(test_profiler_fit.py, test_cli_bad_inputs.py, test_confidence.py, test_own_model.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from planner.model.inputs.profiles import load_platform

TRUE = {"a": 37.19, "b": 12.48, "m": -111.46, "k": 5.0, "c": 592.0}  # ResNet-50 shipped
MEMORIES = (512, 1024, 2048, 4096, 8192)
BATCHES = (8, 16, 32, 64, 128)
SIZES_MB = (0.5, 2.0, 8.0, 32.0, 100.0)


def train_records(noise: float, seed: int = 0, *, memories: tuple[int, ...] = MEMORIES,
                  batches: tuple[int, ...] = BATCHES) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    records = []
    for memory in memories:
        for batch in batches:
            seconds = TRUE["a"] * (batch + TRUE["b"]) / (memory + TRUE["m"])
            peak = TRUE["k"] * batch + TRUE["c"]
            records.append({"kind": "train", "memory_mb": memory, "batch": batch,
                            "seconds": seconds * (1 + noise * rng.standard_normal()),
                            "peak_mb": peak * (1 + noise * rng.standard_normal()),
                            "model": "resnet50", "model_mb": 97.49})
    return records


def transfer_records(noise: float, seed: int = 0, *,
                     sizes: tuple[float, ...] = SIZES_MB) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    truth = load_platform("s3")
    records = []
    for memory in (1024.0, 2048.0, 4096.0):
        for direction in ("up", "down"):
            for size in sizes:
                for _ in range(3):
                    seconds = float(truth.transfer_time(direction, memory, size))
                    records.append({"kind": "transfer", "memory_mb": memory, "channel": "s3",
                                    "direction": direction, "size_mb": size,
                                    "seconds": seconds * (1 + noise * rng.standard_normal())})
    return records


def write(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def fit_args(samples: str, out: Path, *extra: str) -> list[str]:
    return ["fit", "--samples", samples, "--out", str(out), "--name", "fitted-resnet",
            "--dataset", "datasets/cifar10", "--dataset-samples", "50000",
            "--dataset-mb", "146.48", *extra]
