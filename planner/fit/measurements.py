"""``python -m planner fit --csv [PATH] --out DIR``: the shipped "aws-lambda -> S3" platform
profile from measured transfer times.

Reads ``memory_mb,object_mb,upload_s,download_s`` (default: the measurements shipped in
planner/data/measurements, README there), fits tp = p(M)·(1 − e^(−t(M)·S)) per memory and
direction (planner/fit/throughput.py), reports a per-memory table with the fit quality, and writes
``aws-lambda-x86_64-s3.json`` (fitted) and ``aws-lambda-x86_64-valkey.json`` (derived from it;
an assumption) into DIR: with ``--out planner/data/platforms`` it refreshes the shipped files.
"""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from planner.fit.throughput import (
    COLD_START_PROVENANCE,
    DEFAULT_INVOCATION_OVERHEAD_S,
    DEFAULT_TORCH_LOAD_CPU_S,
    DIRECTIONS,
    SaturationFit,
    derive_valkey_profile,
    fit_all,
    platform_from_fits,
    read_transfer_csv,
    relative_time_errors,
    rounded,
)
from planner.model.inputs.profiles import PlatformProfile
from planner.model.inputs.provenance import Provenance

SHIPPED_CSV = "lambda_s3_transfer_times.csv"

S3_SOURCE = (
    "Fitted by python -m planner fit --csv (planner/fit/throughput.py) from "
    "lambda_s3_transfer_times.csv: 456 PUT/GET wall-clock times between an x86_64 Lambda and "
    "S3, memories 128-3008 MB, objects 1-100 MB (128-384 MB only to 20 MB), converted from the "
    "bandwidth tables Optimizer/bw_up.xls and bw_down.xls of the public FasDL code (Chen et al., "
    "IEEE TC 74(2), 2025). Per memory and direction, bounded least squares on the relative "
    "error of the predicted transfer time S/tp(S). Caveats, both kept because they are data: "
    "(1) p(M) is not monotone (upload peaks 87.9 MB/s at 1536 MB, ~84-86 above; download is "
    "flat at ~83-87 MB/s from 384 MB up); (2) the 100 MB measurements look like a separate, "
    "rounded series (throughput 28-130 MB/s, rising with memory) that disagrees with the "
    "1-50 MB curve by up to 50%, so predictions for single objects near 100 MB are the least "
    "certain. Above 3008 MB the 3008 MB coefficients are reused (AWS documents no bandwidth). "
    "invocation_overhead_s: a cold start besides torch (Lambda's own init, the first request), "
    "0.5 s assumed. torch_load_cpu_s: CPU-seconds of the torch layer's unpack + import at one "
    "vCPU, measured locally by bench/cold_start.py (docs/cold-start.md), not on AWS; the model "
    "charges torch_load_cpu_s / min(M/1769, 1) per segment."
)


# The transfer times are the FasDL authors' measurements on AWS Lambda, not ours: kind "paper"
S3_TRANSFER_NOTE = (
    "fitted here from FasDL's published bandwidth sheets, measured on AWS Lambda x86_64 by the "
    "paper's authors; the 100 MB series sets the max error (median 4-6%)")


def s3_provenance(quality: dict[str, dict[str, float]]) -> dict[str, Provenance]:
    """The S3 profile's provenance, with the fit's worst relative time error."""
    worst = max(q["max"] for q in quality.values())
    return {"transfer": Provenance("paper", max_relative_error=round(worst, 4),
                                   note=S3_TRANSFER_NOTE),
            "cold_start": COLD_START_PROVENANCE}


def shipped_csv() -> Path:
    """The measurements the shipped S3 profile was fitted from."""
    return Path(str(resources.files("planner") / "data" / "measurements" / SHIPPED_CSV))


def _row(fit: SaturationFit) -> str:
    return (f"{fit.peak:8.2f} {fit.rate:7.4f} {fit.r_squared:6.3f} "
            f"{fit.median_relative_error:6.3f} {fit.max_relative_error:6.3f}")


def fit_table(fits: list[SaturationFit]) -> list[str]:
    header = "p MB/s  t 1/MB     R²  medRE  maxRE"
    lines = [f"{'M (MB)':>6} {'n':>3} | up: {header} | down: {header}"]
    by_key = {(fit.memory_mb, fit.direction): fit for fit in fits}
    for memory in sorted({fit.memory_mb for fit in fits}):
        up, down = by_key[memory, "up"], by_key[memory, "down"]
        lines.append(f"{memory:6.0f} {up.points:3d} |     {_row(up)} |       {_row(down)}")
    return lines


def fit_quality(profile: PlatformProfile, csv_path: Path) -> dict[str, dict[str, float]]:
    """Relative transfer-time error of the profile over the measurements, per direction."""
    samples = read_transfer_csv(csv_path)
    quality: dict[str, dict[str, float]] = {}
    for direction in DIRECTIONS:
        errors = relative_time_errors(profile, samples, direction)
        quality[direction] = {"points": int(errors.size), "median": float(np.median(errors)),
                              "p90": float(np.quantile(errors, 0.9)), "max": float(errors.max())}
    return quality


def run_csv_fit(csv_path: Path, out_dir: Path) -> tuple[list[str], dict[str, Any]]:
    """Fit, write both platform profiles into ``out_dir``; (report lines, JSON summary)."""
    fits = fit_all(read_transfer_csv(csv_path))
    s3 = rounded(platform_from_fits(
        fits, name="aws-lambda-x86_64-s3", channel="s3", arch="x86_64", source=S3_SOURCE,
        invocation_overhead_s=DEFAULT_INVOCATION_OVERHEAD_S,
        torch_load_cpu_s=DEFAULT_TORCH_LOAD_CPU_S))
    quality = fit_quality(s3, csv_path)
    s3 = replace(s3, provenance=s3_provenance(quality))
    lines = fit_table(fits) + [
        f"{direction:>4}: relative time error over {q['points']:.0f} points: median "
        f"{q['median']:.3f}, p90 {q['p90']:.3f}, max {q['max']:.3f}"
        for direction, q in quality.items()]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for profile in (s3, derive_valkey_profile(s3)):
        path = out_dir / f"{profile.name}.json"
        path.write_text(json.dumps(profile.to_dict(), indent=2) + "\n")
        written.append(str(path))
        lines.append(f"wrote {path}")
    return lines, {"kind": "transfer-csv", "csv": str(csv_path), "written": written,
                   "quality": quality}
