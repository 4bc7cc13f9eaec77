"""Refitting a workload's compute and a platform's cold start from what runs measured, as far
as the measurements identify them: ``python -m planner calibrate`` (planner/commands/calibrate.py,
whose docstring states the rules) and an adaptive run's online calibration
(planner/adapt/online_calibration.py) share these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from planner.fit.client_cpu import nonnegative_line
from planner.fit.workload_fit import Quality, distinct, quality
from planner.model.inputs.compute import predict_train_time
from planner.model.inputs.platform_profile import TORCH_LOAD_THREADS, lambda_vcpus
from planner.model.inputs.profiles import PlatformProfile, WorkloadProfile
from planner.model.inputs.provenance import Provenance, group_of, measured_today


@dataclass(frozen=True)
class RolePoint:
    """One role of one run: where it came from and what it measured."""

    where: str  # "<file> roles.aggregator"
    memory_mb: float
    batch: int
    iterations: int
    compute_s: float  # per iteration
    cold_start_s: float | None


@dataclass(frozen=True)
class Refit:
    """A refitted profile, the quality on the points and what was kept and why."""

    profile: Any
    quality: Quality | None
    kept: tuple[str, ...]
    # refitted over planned compute time at the points: the CPU a run's steps show
    cpu_factor: float = 1.0


def _six_digits(value: float) -> float:
    return float(f"{value:.6g}")


def _compute_at_fixed_m(batch: np.ndarray, memory: np.ndarray, seconds: np.ndarray,
                        m: float) -> tuple[float, float] | None:
    """a, b at the profile's m: (a·B + a·b)/(T·(M+m)) ≈ 1 is linear (as in fit_compute)."""
    scale = seconds * (memory + m)
    design = np.column_stack([batch / scale, 1.0 / scale])
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(batch), rcond=None)
    if alpha <= 0 or beta / alpha <= -1.0:
        return None  # not physical (a step slower at a smaller batch): scale a instead
    return float(alpha), float(beta / alpha)


def refit_compute(workload: WorkloadProfile, points: Sequence[RolePoint],
                  measured_on: str) -> Refit:
    """a, b, m from the points as far as they identify them (module docstring)."""
    batch, memory, seconds = (np.array([getattr(p, name) for p in points], dtype=np.float64)
                              for name in ("batch", "memory_mb", "compute_s"))
    memories, batches = distinct(memory.tolist()), distinct(batch.tolist())
    one_memory = (f"m kept: the runs have one memory size ({memories[0]:g} MB); a run at "
                  f"another memory size identifies it")
    kept: list[str] = []
    a, b, m = workload.a, workload.b, workload.m
    if len(memories) >= 2 and len(batches) >= 2:
        # scipy: only a full fit loads it (an adaptive run's re-plan has one memory size and
        # ships without scipy, infra/replan.py)
        from planner.fit.profiler import fit_compute

        a, b, m = fit_compute(batch, memory, seconds)
    else:
        if len(memories) >= 2:
            kept.append(f"m kept: the runs have one batch size ({batches[0]:g}); with one "
                        f"batch m and b are not apart, so only a is scaled")
        else:
            kept.append(one_memory)
        fitted = (_compute_at_fixed_m(batch, memory, seconds, m) if len(batches) >= 2
                  else None)
        if fitted is not None:
            a, b = fitted
        else:
            kept.append(f"b kept: the runs have one batch size ({batches[0]:g}); a run whose "
                        f"aggregators and non-aggregators train different batches (B^n > "
                        f"B^a) identifies it" if len(batches) < 2 else
                        "b kept: the two batch sizes gave no physical a, b")
            ratio = predict_train_time(batch, memory, a=a, b=b, m=m) / seconds
            a *= float(np.sum(ratio) / np.sum(ratio ** 2))  # least relative squares in a
    new, cpu_factor = with_step_cpu_of(
        replace(workload, a=_six_digits(a), b=_six_digits(b), m=_six_digits(m)), workload,
        batch, memory)
    fit = quality(seconds, new.train_time(batch, memory))
    entry = measured_today(measured_on, r_squared=fit.r_squared,
                           max_relative_error=fit.max_relative_error,
                           note=_note(len(points), kept))
    provenance = {"compute": entry, "memory": group_of(workload.provenance, "memory")}
    return Refit(replace(new, provenance=provenance), fit, tuple(kept), cpu_factor)


def with_step_cpu_of(new: WorkloadProfile, old: WorkloadProfile, batch: Any,
                     memory: Any) -> tuple[WorkloadProfile, float]:
    """``new`` (a, b, m refitted from ``old``) with ``old``'s profiled step CPU (the model's CPU
    bound, planner/model/terms/client_cpu.py) scaled as the step time moved at ``batch`` and
    ``memory``: a platform slower in compute is slower in both; and that factor."""
    factor = float(np.mean(new.train_time(batch, memory) / old.train_time(batch, memory)))
    return replace(new, cpu_step_s=_six_digits(old.cpu_step_s * factor),
                   cpu_sample_s=_six_digits(old.cpu_sample_s * factor)), factor


def _note(points: int, kept: Sequence[str]) -> str:
    text = f"planner calibrate from {points} measured role(s) of runs"
    if kept:
        text += "; " + "; ".join(item.split(":")[0] for item in kept)
    return text


def _load_inverse(memory_mb: float) -> float:
    """1/min(vCPUs(M), threads): the torch load's seconds per CPU-second at M."""
    return float(1.0 / np.minimum(lambda_vcpus(memory_mb), TORCH_LOAD_THREADS))


def refit_cold_start(platform: PlatformProfile, points: Sequence[RolePoint],
                     measured_on: str) -> Refit:
    """invocation_overhead_s and torch_load_cpu_s from the first segments' cold starts."""
    cold = [(p.memory_mb, p.cold_start_s) for p in points if p.cold_start_s is not None]
    if not cold:
        return Refit(platform, None, ("cold start kept: the runs recorded no first-segment "
                                      "invocation with its billed duration",))
    kept: list[str] = []
    xs = [_load_inverse(memory) for memory, _ in cold]
    overhead = platform.invocation_overhead_s
    if len(distinct(xs)) >= 2:
        overhead, torch_cpu = nonnegative_line([(x, s) for x, (_, s) in
                                                zip(xs, cold, strict=True)])
    else:
        kept.append(f"invocation_overhead_s kept: the cold starts share one CPU share "
                    f"({cold[0][0]:g} MB); a run below 1,769 MB at another memory size "
                    f"identifies it")
        torch_cpu = max(0.0, float(np.mean([s - overhead for _, s in cold])) / xs[0])
    new = replace(platform, invocation_overhead_s=_six_digits(overhead),
                  torch_load_cpu_s=_six_digits(torch_cpu))
    measured = np.array([s for _, s in cold], dtype=np.float64)
    fit = quality(measured, new.cold_start_s(np.array([m for m, _ in cold])))
    entry = measured_today(measured_on, r_squared=fit.r_squared,
                           max_relative_error=fit.max_relative_error,
                           note=_note(len(cold), kept))
    provenance: dict[str, Provenance] = {
        "transfer": group_of(platform.provenance, "transfer"), "cold_start": entry}
    return Refit(replace(new, provenance=provenance), fit, tuple(kept))
