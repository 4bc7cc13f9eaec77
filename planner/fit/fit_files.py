"""``python -m planner fit``'s work: profiler samples in, profile files out, with the fits'
quality and their gates (planner/fit/gates.py). The fits themselves are in
planner/fit/profiler.py."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.fit.client_cpu import with_client_cpu
from planner.fit.gates import GATE_GROUPS, Gate, judge_memory, judge_time
from planner.fit.profiler import (
    fit_transfers,
    fit_workload,
    model_size_mb,
    platform_profile,
    sample_arch,
    select_channel,
    workload_profile,
)
from planner.fit.samples import SampleError, Samples, TrainSample, read_samples
from planner.fit.throughput import COLD_START_PROVENANCE, SaturationFit
from planner.fit.workload_fit import Quality, WorkloadFit
from planner.model.inputs.compute import predict_train_time
from planner.model.inputs.profiles import PlatformProfile
from planner.model.inputs.provenance import Provenance, measured_today


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
    JSON summary (its ``workload.gates``: the gates' verdicts). Raises :class:`SampleError`
    naming the argument at fault."""
    samples = read_samples(request.samples)
    paths = output_paths(request.out, request.kind)
    lines: list[str] = [f"read {len(samples.train)} train and {len(samples.transfer)} "
                        f"transfer samples"]
    summary: dict[str, Any] = {"written": paths}
    workload_fit, platform = None, None
    if "platform" in paths:
        platform = _fit_platform(request, samples, paths["platform"], lines, summary)
    if "workload" in paths:
        workload_fit = fit_workload(samples.train)
        _write_workload(request, samples.train, workload_fit, platform, paths["workload"],
                        lines, summary)
    if request.png:
        from planner.fit.profiler_plot import render_fit

        render_fit(request.png, samples, workload_fit, platform)
        lines.append(f"wrote {request.png}")
    lines += [f"wrote {path}" for path in paths.values()]
    return lines, summary


def _write_workload(request: FitRequest, train: Sequence[TrainSample], fit: WorkloadFit,
                    platform: PlatformProfile | None, path: str, lines: list[str],
                    summary: dict[str, Any]) -> None:
    options = _workload_options(request, fit)
    gates = judge_workload(train, fit, platform, options["model_mb"])
    profile = workload_profile(fit, **options,
                               provenance=workload_provenance(request.measured_on, fit, gates))
    Path(path).write_text(json.dumps(profile.to_dict(), indent=2) + "\n")
    lines += [f"workload {profile.name}: a={profile.a:g} b={profile.b:g} m={profile.m:g} "
              f"k={profile.k:g} c={profile.c:g}",
              f"  time   {fit.time_quality.describe()}"]
    if fit.memory_quality is not None:
        lines.append(f"  memory {fit.memory_quality.describe()}")
    lines += [f"  gate: {gate.fit} {'passed by ' + gate.passed_by if gate.passed_by else 'FAILED'}"
              f" ({gate.reason})" for gate in gates]
    summary["workload"] = {**profile.to_dict(), "time_quality": vars(fit.time_quality),
                           "memory_quality": vars(fit.memory_quality),
                           "gates": [gate.to_dict() for gate in gates]}


def judge_workload(train: Sequence[TrainSample], fit: WorkloadFit,
                   platform: PlatformProfile | None, model_mb: float) -> list[Gate]:
    """The time and memory fits against the gates; the time's absolute floor is a share of
    the predicted iteration: the step plus a two-worker exchange (planner/fit/gates.py)."""
    batch = np.array([s.batch for s in train], dtype=np.float64)
    memory = np.array([s.memory_mb for s in train], dtype=np.float64)
    seconds = np.array([s.seconds for s in train], dtype=np.float64)
    predicted = predict_train_time(batch, memory, a=fit.a, b=fit.b, m=fit.m)
    iteration = predicted.copy()
    if platform is not None:
        iteration += sum(platform.transfer_time(direction, memory, model_mb / 2.0)
                         for direction in ("up", "down"))
    gates = [judge_time(fit.time_quality, np.abs(predicted - seconds), iteration)]
    if fit.memory_quality is not None:
        gates.append(judge_memory(fit.memory_quality))
    return gates


def _fit_platform(request: FitRequest, samples: Samples, path: str, lines: list[str],
                  summary: dict[str, Any]) -> PlatformProfile:
    from planner.fit.throughput import DEFAULT_INVOCATION_OVERHEAD_S, DEFAULT_TORCH_LOAD_CPU_S

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
    Path(path).write_text(json.dumps(platform.to_dict(), indent=2) + "\n")
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
    return platform


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
            **request.workload_fields}


def workload_provenance(platform: str, fit: WorkloadFit,
                        gates: Sequence[Gate] = ()) -> dict[str, Provenance]:
    """Both groups measured on ``platform`` today, each with its fit's quality and, when its
    gate failed, ``failed_fit`` and why."""
    failed = {GATE_GROUPS[gate.fit]: gate.reason for gate in gates if not gate.passed}

    def measured(group: str, quality: Quality | None) -> Provenance:
        reason = failed.get(group)
        note = f"below the quality gates: {reason}"[:500] if reason else ""
        if quality is None:
            return measured_today(platform, note=note, failed_fit=reason is not None)
        return measured_today(platform, r_squared=quality.r_squared,
                              max_relative_error=quality.max_relative_error, note=note,
                              failed_fit=reason is not None)

    return {"compute": measured("compute", fit.time_quality),
            "memory": measured("memory", fit.memory_quality)}


def platform_provenance(platform: str, fits: Sequence[SaturationFit]) -> dict[str, Provenance]:
    """The transfers measured on ``platform`` today (the worst series' quality); the cold
    start is the defaults' (planner.fit.throughput.COLD_START_PROVENANCE)."""
    return {"transfer": measured_today(
                platform, r_squared=min(fit.r_squared for fit in fits),
                max_relative_error=max(fit.max_relative_error for fit in fits)),
            "cold_start": COLD_START_PROVENANCE}
