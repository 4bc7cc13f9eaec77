"""The fit half of ``python -m local profile``: samples → planner profiles + quality summary.

It runs :func:`planner.fit.fit_files.run_fit`, the code of ``python -m planner fit --kind both``,
then renames its ``<stem>-workload.json``/``<stem>-platform.json`` to ``workload.json`` and
``platform.json`` and says in the profiles where the numbers come from (a local machine, not
Lambda).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.fit.base_workload import kept_fields, read_base_workload
from planner.fit.fit_files import FitRequest, run_fit
from planner.fit.gates import GATES, advice
from planner.fit.samples import SampleError
from planner.model.inputs.profiles import PlatformProfile, ProfileError, WorkloadProfile


@dataclass(frozen=True)
class DatasetInfo:
    key: str  # the S3 prefix the planner's workload names
    samples: int
    size_mb: float


# As the shipped workload profiles count them (planner/data/workloads).
DATASETS: dict[str, DatasetInfo] = {
    "digits": DatasetInfo("datasets/digits", 1438, 0.1114),
    "cifar10": DatasetInfo("datasets/cifar10", 50_000, 146.48),
}


# Where python -m local profile measures: this machine under Lambda emulation (the fitted
# profiles' provenance, planner/model/inputs/provenance.py)
LOCAL_EMULATION = "local-emulation"

@dataclass(frozen=True)
class BaseWorkload:
    """A workload to profile (python -m planner workload new wrote it): what the profiler
    builds and what the fitted profile keeps."""

    name: str
    model: str
    input_shape: list[int]
    classes: int
    dataset: DatasetInfo
    fields: dict[str, Any]


def load_base_workload(path: Path) -> BaseWorkload:
    """A workload file with or without compute coefficients; raises ValueError naming the
    field (the profile's --workload)."""
    data = read_base_workload(path)
    return BaseWorkload(name=str(data["name"]), model=str(data["model"]),
                        input_shape=list(data["input_shape"]), classes=int(data["classes"]),
                        dataset=DatasetInfo(str(data["dataset"]), int(data["samples"]),
                                            float(data["dataset_mb"])),
                        fields=kept_fields(data))


def gate_warnings(gates: list[dict[str, Any]]) -> list[str]:
    """One line per fit below the gates (planner/fit/gates.py; empty: plan with it)."""
    return [f"warning: the {gate['fit']} fit is below the quality gates: {gate['reason']}; "
            f"{advice()}" for gate in gates if not gate["passed"]]


class ProfileRunError(RuntimeError):
    """An invocation or the fit failed after the servers started (exit 1)."""


@dataclass(frozen=True)
class FitOutputs:
    out: Path
    samples: Path
    workload: Path
    platform: Path
    png: Path | None
    lines: list[str]  # the coefficients and fit quality, for the terminal
    summary: dict[str, Any]  # workload, platform, quality, files, plan_command
    plan_command: str | None  # None: the fit is below the quality gates and not accepted
    fit_failed: bool  # below the gates (accepted or not)

    @property
    def refused(self) -> bool:
        """Below the gates and not accepted: no plan command, ``local profile`` exits 1."""
        return self.fit_failed and self.plan_command is None

    @property
    def written(self) -> list[Path]:
        return [p for p in (self.samples, self.workload, self.platform, self.png) if p]


def _worst(fits: list[dict[str, Any]]) -> dict[str, Any]:
    """One quality for a parameter group fitted per series: the worst series."""
    return {"points": sum(f["points"] for f in fits),
            "r_squared": min(f["r_squared"] for f in fits),
            "max_relative_error": max(f["max_relative_error"] for f in fits)}


def fit_and_write(samples: Path, out: Path, work: Path, *, name: str, model: str,
                  info: DatasetInfo, channel: str, provenance: str,
                  base: BaseWorkload | None = None, accept_failed_fit: bool = False
                  ) -> FitOutputs:
    """Fit both profiles from ``samples`` into ``out``; raises :class:`ProfileRunError`.
    ``base``: the workload profiled, whose own fields the fitted profile keeps; a fit below
    the gates gets a plan command only when ``accept_failed_fit``."""
    png = out / "fit.png"
    request = FitRequest(samples=[str(samples)], out=str(work / "fit.json"), kind="both",
                         name=name, dataset=info.key, dataset_samples=info.samples,
                         dataset_mb=info.size_mb, channel=channel, png=str(png),
                         workload_fields=base.fields if base else {},
                         measured_on=LOCAL_EMULATION)
    try:
        lines, fitted = run_fit(request)
        workload = WorkloadProfile.from_dict(
            json.loads(Path(fitted["written"]["workload"]).read_text()))
        platform = PlatformProfile.from_dict(
            json.loads(Path(fitted["written"]["platform"]).read_text()))
    except (SampleError, ProfileError) as error:  # validated input, so the samples are odd
        raise ProfileRunError(f"the fit of {samples} could not be made ({error}): "
                              f"{advice()}") from error
    if workload.model != model:
        raise ProfileRunError(f"{samples} holds model {workload.model}, not {model}")
    workload = replace(workload, notes=f"{provenance}. {workload.notes}",
                       profiled_memory_mb=_profiled_memories(samples))
    platform = replace(platform, source=f"{provenance}. {platform.source}")
    workload_path, platform_path = out / "workload.json", out / "platform.json"
    workload_path.write_text(json.dumps(workload.to_dict(), indent=2) + "\n")
    platform_path.write_text(json.dumps(platform.to_dict(), indent=2) + "\n")
    summary = _summary(fitted, workload, platform)
    warnings = gate_warnings(fitted["workload"]["gates"])
    command = (None if warnings and not accept_failed_fit
               else plan_command(workload_path, platform_path, platform))
    summary.update({
        "gates": {**GATES, "verdicts": fitted["workload"]["gates"]},
        "fit_failed": bool(warnings), "accepted_failed_fit": bool(warnings) and accept_failed_fit,
        "fit_warnings": warnings, "plan_command": command,
        "files": {"samples": str(samples), "workload": str(workload_path),
                  "platform": str(platform_path), "png": str(png) if png.is_file() else None}})
    shown = [line for line in lines if not line.startswith("wrote ")] + warnings
    return FitOutputs(out=out, samples=samples, workload=workload_path, platform=platform_path,
                      png=png if png.is_file() else None, lines=shown, summary=summary,
                      plan_command=command, fit_failed=bool(warnings))


def _profiled_memories(samples: Path) -> list[float] | None:
    """[smallest, largest] memory the training samples were measured at."""
    memories = sorted({float(record["memory_mb"]) for record in
                       (json.loads(line) for line in samples.read_text().splitlines()
                        if line.strip()) if record.get("kind") == "train"})
    return [memories[0], memories[-1]] if memories else None


def plan_command(workload: Path, platform_path: Path, platform: PlatformProfile) -> str:
    return shlex.join([
        "python", "-m", "planner", "plan", "--workload", str(workload),
        "--platform", str(platform_path), "--channel", platform.channel,
        "--arch", platform.arch, "--deadline", "3600", "--max-global-batch", "256",
        "--epochs", "10", "--out", "plan.json"])


def _summary(fitted: dict[str, Any], workload: WorkloadProfile,
             platform: PlatformProfile) -> dict[str, Any]:
    transfers = fitted["transfer_fits"]
    return {
        "workload": {key: value for key, value in workload.to_dict().items() if key != "notes"},
        "platform": {key: value for key, value in platform.to_dict().items()
                     if key != "source"},
        "quality": {
            "time (a, b, m)": fitted["workload"]["time_quality"],
            "memory (k, c)": fitted["workload"]["memory_quality"],
            "transfer (p, t)": _worst(transfers),
            "transfer series": [{key: fit[key] for key in (
                "memory_mb", "direction", "peak", "rate", "points", "r_squared",
                "max_relative_error")} for fit in transfers],
        },
    }
