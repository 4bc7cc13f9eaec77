"""Fit planner profiles from profiler samples (JSONL written by
``functions/fasdl/profiling/measure.py``).

Workload: T = a·(B+b)/(M+m) by a grid over m with a weighted linear fit of (a, a·b) at each m
(the model is linear in them once m is fixed), refined by bounded ``least_squares`` on relative
errors; M_B = k·B + c by bounded linear least squares on the peak memory. Platform: p, t per
memory and direction with :func:`planner.fit.throughput.fit_series` (the fit of the shipped
S3 profile).

A parameter the samples cannot identify is refused with :class:`SampleError` naming the missing
dimension: a·(B+b) needs two batch sizes, m needs two memories, p and t need two object sizes
per memory and direction.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares, lsq_linear

from planner.fit.client_cpu import cpu_digits, nonnegative_line
from planner.fit.samples import (
    DuplexRecord,
    SampleError,
    TrainSample,
    TransferRecord,
    by_channel,
)
from planner.fit.throughput import (
    SaturationFit,
    fit_series,
    platform_from_fits,
    rounded,
)
from planner.fit.workload_fit import WorkloadFit, distinct, quality
from planner.model.inputs.compute import predict_train_time
from planner.model.inputs.profiles import (
    DIRECTIONS,
    LAMBDA_MAX_MEMORY_MB,
    PlatformProfile,
    WorkloadProfile,
)

# a, b at most what a workload profile accepts (planner/model/inputs/profiles.py)
PROFILE_MAX_A = PROFILE_MAX_B = 1e6

# ---- workload ---------------------------------------------------------------------------------


def sorted_text(values: Iterable[str]) -> list[str]:
    return sorted(set(values))


def fit_compute(batch: NDArray[np.float64], memory: NDArray[np.float64],
                seconds: NDArray[np.float64]) -> tuple[float, float, float]:
    """a, b, m of T = a·(B+b)/(M+m), minimising relative time errors."""
    # M + m > 0 at every profiled memory (and at Lambda's largest); m within the profile's bound
    floor = -min(float(memory.min()), LAMBDA_MAX_MEMORY_MB) * 0.999
    span = min(100.0 * float(memory.max()), 1e6)
    best = (math.inf, 1.0, 0.0, 0.0)
    for m in np.concatenate([np.linspace(floor, 0.0, 200, endpoint=False),
                             np.geomspace(1.0, span, 200)]):
        # (α·B + β)/(T·(M+m)) ≈ 1 is linear in α = a, β = a·b.
        scale = seconds * (memory + m)
        design = np.column_stack([batch / scale, 1.0 / scale])
        (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(batch), rcond=None)
        if alpha <= 0 or beta / alpha <= -1.0:
            continue
        cost = float(np.sum((design @ [alpha, beta] - 1.0) ** 2))
        if cost < best[0]:
            best = (cost, float(alpha), float(beta / alpha), float(m))
    _, a0, b0, m0 = best

    def residuals(params: NDArray[np.float64]) -> NDArray[np.float64]:
        a, b, m = params
        predicted = predict_train_time(batch, memory, a=a, b=b, m=m)
        return np.asarray(predicted / seconds - 1.0, dtype=np.float64)

    # b stays clear of -1 by more than the 6 significant digits the profile keeps; a and b
    # within the profile's ranges: times flat in B push b up without bound (a·b/(M+m) is
    # then the step), and such a fit is the gates' to judge, not a profile-field error.
    lower, upper = [1e-12, -1.0 + 1e-5, floor], [PROFILE_MAX_A, PROFILE_MAX_B, span]
    start = np.clip([a0, b0, m0], np.add(lower, 1e-12), np.multiply(upper, 1 - 1e-9))
    result = least_squares(residuals, start, bounds=(lower, upper), x_scale="jac", method="trf")
    a, b, m = (float(value) for value in result.x)
    return a, b, m


def fit_memory(batch: NDArray[np.float64], peak_mb: NDArray[np.float64]) -> tuple[float, float]:
    """k > 0, c >= 0 of M_B = k·B + c by bounded linear least squares."""
    result = lsq_linear(np.column_stack([batch, np.ones_like(batch)]), peak_mb,
                        bounds=([1e-9, 0.0], [np.inf, np.inf]))
    return float(result.x[0]), float(result.x[1])


def fit_workload(train: Sequence[TrainSample]) -> WorkloadFit:
    if not train:
        raise SampleError("no 'train' samples: the workload fit needs training-time samples")
    models = sorted_text(sample.model for sample in train)
    if len(models) > 1:
        raise SampleError(f"samples mix models {', '.join(models)}: fit one model at a time")
    batches = distinct(sample.batch for sample in train)
    memories = distinct(sample.memory_mb for sample in train)
    if len(batches) < 2:
        raise SampleError(f"cannot identify a and b: training samples have a single batch size "
                          f"({batches[0]:g}); profile at least 2 batch sizes")
    if len(memories) < 2:
        raise SampleError(f"cannot identify m: training samples have a single memory size "
                          f"({memories[0]:g} MB); profile at least 2 memory sizes")
    batch = np.array([s.batch for s in train], dtype=np.float64)
    memory = np.array([s.memory_mb for s in train], dtype=np.float64)
    seconds = np.array([s.seconds for s in train], dtype=np.float64)
    a, b, m = fit_compute(batch, memory, seconds)
    time_quality = quality(seconds, predict_train_time(batch, memory, a=a, b=b, m=m))
    with_peak = [s for s in train if s.peak_mb is not None]
    if len(distinct(s.batch for s in with_peak)) < 2:
        raise SampleError("cannot identify k and c: fewer than 2 batch sizes have 'peak_mb'")
    peak_batch = np.array([s.batch for s in with_peak], dtype=np.float64)
    peak = np.array([s.peak_mb for s in with_peak], dtype=np.float64)
    k, c = fit_memory(peak_batch, peak)
    model_mbs = distinct(s.model_mb for s in train if s.model_mb is not None)
    cpu_step, cpu_sample = fit_train_cpu(train)
    return WorkloadFit(a, b, m, k, c, time_quality, quality(peak, k * peak_batch + c),
                       models[0], model_mbs[-1] if model_mbs else None, cpu_step, cpu_sample)


def fit_train_cpu(train: Sequence[TrainSample]) -> tuple[float, float]:
    """(cpu_step_s, cpu_sample_s) >= 0 of CPU = cpu_step_s + B·cpu_sample_s, over every
    memory (a step's CPU does not depend on M); zeros unless every sample has its CPU."""
    if any(sample.cpu_s is None for sample in train):
        return 0.0, 0.0
    step, per_sample = nonnegative_line([(float(s.batch), float(s.cpu_s or 0.0))
                                         for s in train])
    return cpu_digits(step), cpu_digits(per_sample)


def model_size_mb(fit: WorkloadFit, override: float | None) -> float:
    """The model's parameter MB: the option, the samples, else the registry (needs torch)."""
    if override is not None:
        return override
    if fit.model_mb is not None:
        return fit.model_mb
    try:
        from fasdl.training.networks import MODELS, parameter_mb
    except ImportError as error:  # torch missing: the user must say how big the model is
        raise SampleError(f"cannot size model {fit.model!r} ({error}); pass --model-mb",
                          "--model-mb") from error
    if fit.model not in MODELS:
        raise SampleError(f"model {fit.model!r} is not in the registry; pass --model-mb",
                          "--model-mb")
    return parameter_mb(fit.model)


def workload_profile(fit: WorkloadFit, *, name: str, dataset: str, samples: int,
                     dataset_mb: float, model_mb: float, notes: str = "",
                     **fields: Any) -> WorkloadProfile:
    """The fitted profile; ``fields``: the workload's own (a model of one's own needs its
    input_shape and classes; its loss, statistics and recipe go along)."""
    return WorkloadProfile.from_dict({
        "name": name, "model": fit.model, "dataset": dataset, "samples": samples,
        "dataset_mb": dataset_mb, "model_mb": model_mb, "notes": notes,
        "cpu_step_s": fit.cpu_step_s, "cpu_sample_s": fit.cpu_sample_s, **fields,
        "a": _six_digits(fit.a), "b": _six_digits(fit.b), "m": _six_digits(fit.m),
        "k": _six_digits(fit.k), "c": _six_digits(fit.c)})


def _six_digits(value: float) -> float:
    """Six significant digits: profiles keep what the fit can support, no float noise."""
    return float(f"{value:.6g}")


# ---- platform ---------------------------------------------------------------------------------

def select_channel(transfer: Sequence[TransferRecord], channel: str | None) -> str:
    channels = sorted_text(r.channel for r in transfer)
    if not channels:
        raise SampleError("no 'transfer' samples: the platform fit needs transfer samples")
    if channel is None:
        if len(channels) > 1:
            raise SampleError(f"samples cover channels {', '.join(channels)}; pick one with "
                              "--channel", "--channel")
        return channels[0]
    if channel not in channels:
        raise SampleError(f"no {channel} transfer samples (found {', '.join(channels)})",
                          "--channel")
    return channel


def fit_transfers(transfer: Sequence[TransferRecord], channel: str) -> list[SaturationFit]:
    """p, t per memory and direction; every memory needs both directions at 2+ sizes."""
    series: dict[tuple[float, str], list[TransferRecord]] = defaultdict(list)
    for record in by_channel(transfer).get(channel, []):
        series[record.memory_mb, record.direction].append(record)
    fits = []
    for memory in distinct(memory for memory, _ in series):
        for direction in DIRECTIONS:
            records = series.get((memory, direction), [])
            sizes = distinct(r.size_mb for r in records)
            if len(sizes) < 2:
                raise SampleError(
                    f"cannot identify p and t at {memory:g} MB ({channel} {direction}): "
                    f"{len(sizes)} object size(s); profile at least 2 object sizes per memory")
            fits.append(fit_series(memory, direction,
                                   [r.size_mb for r in records], [r.seconds for r in records]))
    return fits


def platform_profile(fits: Sequence[SaturationFit], *, name: str, channel: str, arch: str,
                     source: str, invocation_overhead_s: float,
                     torch_load_cpu_s: float,
                     duplex: Sequence[DuplexRecord] = ()) -> PlatformProfile:
    profile = platform_from_fits(fits, name=name, channel=channel, arch=arch, source=source,
                                 invocation_overhead_s=invocation_overhead_s,
                                 torch_load_cpu_s=torch_load_cpu_s)
    return rounded(replace(profile, duplex=fit_duplex(duplex, channel, profile.memory_mb)))


def fit_duplex(records: Sequence[DuplexRecord], channel: str,
               memories: Sequence[float]) -> tuple[float, ...]:
    """d per memory: the median of ``channel``'s records there (a memory without any takes the
    median of all); () without any record (the profile then assumes full duplex)."""
    mine = by_channel(records).get(channel, [])
    if not mine:
        return ()
    overall = float(np.median([record.duplex() for record in mine]))
    fitted = []
    for memory in memories:
        here = [record.duplex() for record in mine if record.memory_mb == memory]
        fitted.append(round(float(np.median(here)), 3) if here else round(overall, 3))
    return tuple(fitted)


def sample_arch(transfer: Sequence[TransferRecord]) -> str | None:
    arches = sorted_text(r.arch for r in transfer if r.arch)
    return arches[0] if len(arches) == 1 else None
