"""The fit half of ``python -m local profile``: samples → planner profiles + quality summary.

It runs :func:`planner.fit.profiler.run_fit`, the code of ``python -m planner fit --kind both``,
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

from planner.fit.profiler import FitRequest, run_fit
from planner.fit.samples import SampleError
from planner.model.profiles import PlatformProfile, ProfileError, WorkloadProfile


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
    plan_command: str

    @property
    def written(self) -> list[Path]:
        return [p for p in (self.samples, self.workload, self.platform, self.png) if p]


def _worst(fits: list[dict[str, Any]]) -> dict[str, Any]:
    """One quality for a parameter group fitted per series: the worst series."""
    return {"points": sum(f["points"] for f in fits),
            "r_squared": min(f["r_squared"] for f in fits),
            "max_relative_error": max(f["max_relative_error"] for f in fits)}


def fit_and_write(samples: Path, out: Path, work: Path, *, name: str, model: str, dataset: str,
                  channel: str, provenance: str) -> FitOutputs:
    """Fit both profiles from ``samples`` into ``out``; raises :class:`ProfileRunError`."""
    info = DATASETS[dataset]
    png = out / "fit.png"
    request = FitRequest(samples=[str(samples)], out=str(work / "fit.json"), kind="both",
                         name=name, dataset=info.key, dataset_samples=info.samples,
                         dataset_mb=info.size_mb, channel=channel, png=str(png))
    try:
        lines, fitted = run_fit(request)
        workload = WorkloadProfile.from_dict(
            json.loads(Path(fitted["written"]["workload"]).read_text()))
        platform = PlatformProfile.from_dict(
            json.loads(Path(fitted["written"]["platform"]).read_text()))
    except (SampleError, ProfileError) as error:  # validated input, so the samples are odd
        raise ProfileRunError(f"the fit of {samples} failed: {error}") from error
    if workload.model != model:
        raise ProfileRunError(f"{samples} holds model {workload.model}, not {model}")
    workload = replace(workload, notes=f"{provenance}. {workload.notes}")
    platform = replace(platform, source=f"{provenance}. {platform.source}")
    workload_path, platform_path = out / "workload.json", out / "platform.json"
    workload_path.write_text(json.dumps(workload.to_dict(), indent=2) + "\n")
    platform_path.write_text(json.dumps(platform.to_dict(), indent=2) + "\n")
    command = shlex.join([
        "python", "-m", "planner", "plan", "--workload", str(workload_path),
        "--platform", str(platform_path), "--channel", platform.channel,
        "--arch", platform.arch, "--deadline", "3600", "--max-global-batch", "256",
        "--epochs", "10", "--out", "plan.json"])
    time_quality = fitted["workload"]["time_quality"]
    memory_quality = fitted["workload"]["memory_quality"]
    transfers = fitted["transfer_fits"]
    summary: dict[str, Any] = {
        "workload": {key: value for key, value in workload.to_dict().items() if key != "notes"},
        "platform": {key: value for key, value in platform.to_dict().items()
                     if key != "source"},
        "quality": {
            "time (a, b, m)": time_quality,
            "memory (k, c)": memory_quality,
            "transfer (p, t)": _worst(transfers),
            "transfer series": [{key: fit[key] for key in (
                "memory_mb", "direction", "peak", "rate", "points", "r_squared",
                "max_relative_error")} for fit in transfers],
        },
        "files": {"samples": str(samples), "workload": str(workload_path),
                  "platform": str(platform_path), "png": str(png) if png.is_file() else None},
        "plan_command": command,
    }
    shown = [line for line in lines if not line.startswith("wrote ")]
    return FitOutputs(out=out, samples=samples, workload=workload_path, platform=platform_path,
                      png=png if png.is_file() else None, lines=shown, summary=summary,
                      plan_command=command)
