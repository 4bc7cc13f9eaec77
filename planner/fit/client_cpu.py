"""The client-CPU coefficients κ of a platform profile, fitted from the profiler's transfer
samples (planner/model/terms/client_cpu.py charges them per iteration)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from planner.fit.samples import TransferRecord, by_channel, by_direction
from planner.model.inputs.profiles import DIRECTIONS, PlatformProfile


def fit_client_cpu(transfer: Sequence[TransferRecord], channel: str) -> dict[str, float]:
    """The profile's κ from ``channel``'s transfer samples: per direction, CPU = κ_req +
    κ_MB·S by least squares with both >= 0 (over every memory: CPU seconds do not depend on
    M); κ_fold and the codec's κ the marginal CPU per MB (module docstring). Zeros where the
    samples hold no CPU times."""
    mine = by_channel(transfer).get(channel, [])
    directions = by_direction(mine)
    fitted: dict[str, float] = {}
    for direction in DIRECTIONS:
        timed = [(r.size_mb, r.cpu_s) for r in directions.get(direction, [])
                 if r.cpu_s is not None]
        request_s, mb_s = nonnegative_line(timed)
        fitted[f"cpu_{direction}_request_s"] = request_s
        fitted[f"cpu_{direction}_mb_s"] = mb_s
    fitted["cpu_fold_mb_s"] = _marginal_per_mb((r.size_mb, r.fold_cpu_s) for r in mine)
    for direction, name in (("up", "cpu_bf16_frame_mb_s"), ("down", "cpu_bf16_fold_mb_s")):
        fitted[name] = _marginal_per_mb((r.size_mb, r.bf16_cpu_s)
                                        for r in directions.get(direction, []))
    return {name: cpu_digits(value) for name, value in fitted.items()}


def cpu_digits(value: float) -> float:
    """Four significant digits: what a profile keeps of a fitted CPU coefficient."""
    return float(f"{value:.4g}")


def _marginal_per_mb(points: Iterable[tuple[float, float | None]]) -> float:
    """CPU per MB by least squares through the origin, Σ S·cpu / Σ S², over the points that
    have a CPU time (the large sizes weigh most); 0 if none has."""
    timed = [(size, cpu) for size, cpu in points if cpu is not None]
    squares = sum(size * size for size, _ in timed)
    return max(0.0, sum(size * cpu for size, cpu in timed) / squares) if squares > 0 else 0.0


def nonnegative_line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) >= 0 minimising the squared error of y = intercept + slope·x."""
    from scipy.optimize import lsq_linear  # the fit's alone: planning does not load scipy

    if not points:
        return 0.0, 0.0
    x, y = (np.asarray(values, dtype=np.float64) for values in zip(*points, strict=True))
    design = np.column_stack([np.ones_like(x), x])
    solution = lsq_linear(design, y, bounds=(0.0, np.inf)).x
    return float(solution[0]), float(solution[1])


def with_client_cpu(profile: PlatformProfile, transfer: Sequence[TransferRecord],
                    channel: str) -> PlatformProfile:
    """``profile`` with the κ fitted from ``transfer``."""
    fitted = fit_client_cpu(transfer, channel)
    return replace(profile, cpu_up_request_s=fitted["cpu_up_request_s"],
                   cpu_up_mb_s=fitted["cpu_up_mb_s"],
                   cpu_down_request_s=fitted["cpu_down_request_s"],
                   cpu_down_mb_s=fitted["cpu_down_mb_s"], cpu_fold_mb_s=fitted["cpu_fold_mb_s"],
                   cpu_bf16_frame_mb_s=fitted["cpu_bf16_frame_mb_s"],
                   cpu_bf16_fold_mb_s=fitted["cpu_bf16_fold_mb_s"])
