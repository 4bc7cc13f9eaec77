"""A workload profile's fit from training samples, and its quality: what the profiler fit
produces and the plot draws."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Quality:
    points: int
    r_squared: float
    max_relative_error: float
    max_absolute_error: float  # in the measured unit (s, MB)

    def describe(self) -> str:
        return (f"R² {self.r_squared:.4f}, max relative error {self.max_relative_error:.1%} "
                f"over {self.points} points")


def quality(measured: NDArray[np.float64], predicted: NDArray[np.float64]) -> Quality:
    total = float(np.sum((measured - measured.mean()) ** 2))
    residual = float(np.sum((measured - predicted) ** 2))
    r_squared = 1.0 - residual / total if total > 0 else 1.0
    error = np.abs(predicted - measured)
    relative = float(np.max(error / measured))
    return Quality(int(measured.size), r_squared, relative, float(np.max(error)))



@dataclass(frozen=True)
class WorkloadFit:
    a: float
    b: float
    m: float
    k: float
    c: float
    time_quality: Quality
    memory_quality: Quality | None
    model: str
    model_mb: float | None
    cpu_step_s: float = 0.0  # CPU per iteration = cpu_step_s + B·cpu_sample_s (0: unmeasured)
    cpu_sample_s: float = 0.0


def distinct(values: Iterable[float]) -> list[float]:
    return sorted(set(values))
