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

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares, lsq_linear

from planner.fit.client_cpu import cpu_digits, nonnegative_line, with_client_cpu
from planner.fit.samples import (
    DuplexRecord,
    SampleError,
    TrainSample,
    TransferRecord,
    by_channel,
    read_samples,
)
from planner.fit.throughput import (
    COLD_START_PROVENANCE,
    SaturationFit,
    fit_series,
    platform_from_fits,
    rounded,
)
from planner.fit.workload_fit import Quality, WorkloadFit, distinct, quality
from planner.model.inputs.compute import predict_train_time
from planner.model.inputs.profiles import (
    DIRECTIONS,
    LAMBDA_MAX_MEMORY_MB,
    PlatformProfile,
    WorkloadProfile,
)
from planner.model.inputs.provenance import Provenance, measured_today

# ---- quality ----------------------------------------------------------------------------------


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

    # b stays clear of -1 by more than the 6 significant digits the profile keeps.
    lower, upper = [1e-12, -1.0 + 1e-5, floor], [np.inf, np.inf, span]
    start = np.clip([a0, b0, m0], np.add(lower, 1e-12), np.subtract(upper, 1e-9))
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


# ---- the `fit` command ------------------------------------------------------------------------

@dataclass(frozen=True)
class FitRequest:
    samples: Sequence[str]
    out: str
    kind: str = "both"  # workload | platform | both
    name: str | None = None
    model_mb: float | None = None
    dataset: str | None = None
    dataset_samples: int | None = None
    dataset_mb: float | None = None
    channel: str | None = None
    arch: str | None = None
    invocation_overhead_s: float | None = None
    torch_load_cpu_s: float | None = None  # None: planner.fit.throughput's local measurement
    png: str | None = None
    # the workload's own fields the profile keeps (local profile --workload)
    workload_fields: Mapping[str, Any] = field(default_factory=dict)
    # where the samples were measured, the fitted groups' provenance
    # (planner/model/inputs/provenance.py):
    # aws-lambda (the profiling state machine) or local-emulation (python -m local profile)
    measured_on: str = "aws-lambda"


def output_paths(out: str, kind: str) -> dict[str, str]:
    """``--out`` as is for one kind; ``<stem>-workload.json`` and ``<stem>-platform.json``
    next to it for both."""
    if kind != "both":
        return {kind: out}
    path = Path(out)
    return {part: str(path.with_name(f"{path.stem}-{part}{path.suffix or '.json'}"))
            for part in ("workload", "platform")}


def run_fit(request: FitRequest) -> tuple[list[str], dict[str, Any]]:
    """Fit, write the profile JSON file(s) and the optional PNG; returns report lines and a
    JSON summary. Raises :class:`SampleError` naming the argument at fault."""
    from planner.fit.throughput import DEFAULT_INVOCATION_OVERHEAD_S, DEFAULT_TORCH_LOAD_CPU_S

    samples = read_samples(request.samples)
    paths = output_paths(request.out, request.kind)
    lines: list[str] = [f"read {len(samples.train)} train and {len(samples.transfer)} "
                        f"transfer samples"]
    summary: dict[str, Any] = {"written": paths}
    workload_fit, platform = None, None
    if "workload" in paths:
        workload_fit = fit_workload(samples.train)
        profile = workload_profile(workload_fit, **_workload_options(request, workload_fit))
        Path(paths["workload"]).write_text(json.dumps(profile.to_dict(), indent=2) + "\n")
        lines += [f"workload {profile.name}: a={profile.a:g} b={profile.b:g} m={profile.m:g} "
                  f"k={profile.k:g} c={profile.c:g}",
                  f"  time   {workload_fit.time_quality.describe()}"]
        if workload_fit.memory_quality is not None:
            lines.append(f"  memory {workload_fit.memory_quality.describe()}")
        summary["workload"] = {**profile.to_dict(),
                               "time_quality": vars(workload_fit.time_quality),
                               "memory_quality": vars(workload_fit.memory_quality)}
    if "platform" in paths:
        channel = select_channel(samples.transfer, request.channel)
        fits = fit_transfers(samples.transfer, channel)
        arch = request.arch or sample_arch(samples.transfer) or "x86_64"
        platform = platform_profile(
            fits, name=f"{request.name or 'profiled'}-{arch}-{channel}", channel=channel,
            arch=arch, source=f"python -m planner fit from {len(samples.transfer)} transfer "
                              f"samples ({', '.join(Path(p).name for p in request.samples)})",
            invocation_overhead_s=(DEFAULT_INVOCATION_OVERHEAD_S
                                   if request.invocation_overhead_s is None
                                   else request.invocation_overhead_s),
            torch_load_cpu_s=(DEFAULT_TORCH_LOAD_CPU_S if request.torch_load_cpu_s is None
                              else request.torch_load_cpu_s),
            duplex=samples.duplex)
        platform = replace(with_client_cpu(platform, samples.transfer, channel),
                           provenance=platform_provenance(request.measured_on, fits))
        Path(paths["platform"]).write_text(json.dumps(platform.to_dict(), indent=2) + "\n")
        lines.append(f"platform {platform.name}: duplex "
                     + (", ".join(f"{d:g}" for d in platform.duplex) + " (1 = upload and "
                        "download overlap fully)" if platform.duplex else
                        "1 (assumed: no duplex samples)"))
        for fit in fits:
            lines.append(f"  {fit.memory_mb:>7g} MB {fit.direction:<4} p={fit.peak:.4g} MB/s "
                         f"t={fit.rate:.4g}/MB R² {fit.r_squared:.4f} max relative error "
                         f"{fit.max_relative_error:.1%} ({fit.points} points)")
        summary["platform"] = platform.to_dict()
        summary["transfer_fits"] = [vars(fit) for fit in fits]
    if request.png:
        from planner.fit.profiler_plot import render_fit

        render_fit(request.png, samples, workload_fit, platform)
        lines.append(f"wrote {request.png}")
    lines += [f"wrote {path}" for path in paths.values()]
    return lines, summary


def _workload_options(request: FitRequest, fit: WorkloadFit) -> dict[str, Any]:
    if not request.name:
        raise SampleError("required to write a workload profile", "--name")
    missing = [argument for argument, value in (("--dataset-samples", request.dataset_samples),
                                                ("--dataset-mb", request.dataset_mb))
               if value is None]
    if missing:
        raise SampleError("required to write a workload profile (the dataset's size)",
                          missing[0])
    assert request.dataset_samples is not None and request.dataset_mb is not None
    return {"name": request.name, "dataset": request.dataset or f"datasets/{request.name}",
            "samples": request.dataset_samples, "dataset_mb": request.dataset_mb,
            "model_mb": model_size_mb(fit, request.model_mb),
            "notes": f"fitted by python -m planner fit; time {fit.time_quality.describe()}",
            **request.workload_fields, "provenance": workload_provenance(request.measured_on, fit)}


def workload_provenance(platform: str, fit: WorkloadFit) -> dict[str, Provenance]:
    """Both groups measured on ``platform`` today, each with its fit's quality."""
    def measured(quality: Quality | None) -> Provenance:
        if quality is None:
            return measured_today(platform)
        return measured_today(platform, r_squared=quality.r_squared,
                              max_relative_error=quality.max_relative_error)

    return {"compute": measured(fit.time_quality), "memory": measured(fit.memory_quality)}


def platform_provenance(platform: str, fits: Sequence[SaturationFit]) -> dict[str, Provenance]:
    """The transfers measured on ``platform`` today (the worst series' quality); the cold
    start is the defaults' (planner.fit.throughput.COLD_START_PROVENANCE)."""
    return {"transfer": measured_today(
                platform, r_squared=min(fit.r_squared for fit in fits),
                max_relative_error=max(fit.max_relative_error for fit in fits)),
            "cold_start": COLD_START_PROVENANCE}
