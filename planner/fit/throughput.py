"""Fit the FasDL throughput model tp(S) = p·(1 − e^(−t·S)) to measured transfer times.

Per memory size and direction we fit the peak bandwidth p (MB/s) and the rate t (1/MB) with
bounded ``scipy.optimize.least_squares`` on *relative* errors of the predicted transfer time
S/tp(S) against the measured time. Why time and why relative:

* the planner consumes times (it adds shard transfer times), so time is the quantity to get right;
* object sizes span 1–100 MB, so absolute time residuals would let the few 100 MB points
  dominate, while the small-shard regime (large K) is exactly what shapes FasDL's "U" curve.
  Relative residuals weigh every measurement equally; they are the same as relative errors of
  the measured throughput against the predicted one, measured/predicted − 1.

This module is for development (profiling a platform); the planner at run time only reads the
JSON that ``python -m planner fit --csv`` (planner/fit/measurements.py) writes from it.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from planner.model.inputs.profiles import Direction, PlatformProfile
from planner.model.inputs.provenance import Provenance, group_of

DIRECTIONS: tuple[Direction, Direction] = ("up", "down")

# Bounds keep the optimiser in physical territory: a peak up to 10x the fastest observed
# throughput (the 128-384 MB series stop at 20 MB and have not saturated), a rate between
# "saturates after ~10 GB" and "saturates within ~10 KB".
_PEAK_BOUND_FACTOR = 10.0
_RATE_BOUNDS = (1e-4, 100.0)


@dataclass(frozen=True)
class TransferSample:
    """One measured object transfer: size in MB, upload and download wall-clock seconds."""

    memory_mb: float
    object_mb: float
    upload_s: float
    download_s: float

    def seconds(self, direction: Direction) -> float:
        return self.upload_s if direction == "up" else self.download_s


@dataclass(frozen=True)
class SaturationFit:
    """Fitted p, t for one memory and direction, with the fit's quality on its own points."""

    memory_mb: float
    direction: Direction
    peak: float  # p, MB/s
    rate: float  # t, 1/MB
    points: int
    r_squared: float  # of predicted vs measured transfer time
    median_relative_error: float  # |predicted − measured| / measured, over the points
    max_relative_error: float
    largest_size_mb: float

    @property
    def saturated_fraction(self) -> float:
        """tp/p at the largest measured size: near 1 means p is pinned down by the data."""
        return float(-np.expm1(-self.rate * self.largest_size_mb))


def read_transfer_csv(path: str | Path) -> list[TransferSample]:
    """Read ``memory_mb,object_mb,upload_s,download_s`` rows (planner/data/measurements)."""
    with Path(path).open(newline="") as handle:
        reader = csv.DictReader(handle)
        expected = {"memory_mb", "object_mb", "upload_s", "download_s"}
        missing = expected - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: missing columns {', '.join(sorted(missing))}")
        samples = [
            TransferSample(float(row["memory_mb"]), float(row["object_mb"]),
                           float(row["upload_s"]), float(row["download_s"]))
            for row in reader
        ]
    if not samples:
        raise ValueError(f"{path}: no measurements")
    for sample in samples:
        if min(sample.object_mb, sample.upload_s, sample.download_s) <= 0:
            raise ValueError(f"{path}: non-positive size or time in {sample}")
    return samples


def predicted_seconds(peak: float, rate: float,
                      size_mb: NDArray[np.float64]) -> NDArray[np.float64]:
    """S / (p·(1 − e^(−t·S))), with expm1 so small t·S keeps its precision."""
    return np.asarray(size_mb / (peak * -np.expm1(-rate * size_mb)), dtype=np.float64)


def fit_saturation(size_mb: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares p, t for one series; several starts, because the problem is not convex."""
    sizes = np.asarray(size_mb, dtype=np.float64)
    times = np.asarray(seconds, dtype=np.float64)
    if sizes.size < 2:
        raise ValueError("need at least two object sizes to fit p and t")
    throughput = sizes / times
    peak_high = _PEAK_BOUND_FACTOR * float(throughput.max())

    def residuals(params: np.ndarray) -> np.ndarray:
        return predicted_seconds(params[0], params[1], sizes) / times - 1.0

    best: tuple[float, float] | None = None
    best_cost = np.inf
    for peak_start in (1.05, 1.5, 3.0):
        peak0 = min(peak_start * float(throughput.max()), 0.99 * peak_high)
        # Start t where the model passes through the smallest object's throughput.
        smallest = int(np.argmin(sizes))
        ratio = min(throughput[smallest] / peak0, 0.99)
        rate0 = float(np.clip(-np.log1p(-ratio) / sizes[smallest], *_RATE_BOUNDS))
        result = least_squares(residuals, x0=[peak0, rate0],
                               bounds=([1e-6, _RATE_BOUNDS[0]], [peak_high, _RATE_BOUNDS[1]]),
                               x_scale="jac", method="trf")
        if result.cost < best_cost:
            best_cost = float(result.cost)
            best = (float(result.x[0]), float(result.x[1]))
    assert best is not None  # the loop always runs
    return best


def fit_series(memory_mb: float, direction: Direction, size_mb: Sequence[float],
               seconds: Sequence[float]) -> SaturationFit:
    """Fit one (memory, direction) series and score it on its own points."""
    peak, rate = fit_saturation(size_mb, seconds)
    sizes = np.asarray(size_mb, dtype=np.float64)
    times = np.asarray(seconds, dtype=np.float64)
    predicted = predicted_seconds(peak, rate, sizes)
    relative = np.abs(predicted - times) / times
    total = float(np.sum((times - times.mean()) ** 2))
    r_squared = 1.0 - float(np.sum((times - predicted) ** 2)) / total if total > 0 else 1.0
    return SaturationFit(memory_mb=memory_mb, direction=direction, peak=peak, rate=rate,
                         points=int(sizes.size), r_squared=r_squared,
                         median_relative_error=float(np.median(relative)),
                         max_relative_error=float(relative.max()),
                         largest_size_mb=float(sizes.max()))


def fit_all(samples: Iterable[TransferSample]) -> list[SaturationFit]:
    """Fit every memory in the samples, both directions, sorted by memory then direction."""
    by_memory: dict[float, list[TransferSample]] = defaultdict(list)
    for sample in samples:
        by_memory[sample.memory_mb].append(sample)
    fits = []
    for memory in sorted(by_memory):
        series = sorted(by_memory[memory], key=lambda s: s.object_mb)
        sizes = [s.object_mb for s in series]
        for direction in DIRECTIONS:
            fits.append(fit_series(memory, direction, sizes,
                                   [s.seconds(direction) for s in series]))
    return fits


def platform_from_fits(fits: Sequence[SaturationFit], *, name: str, channel: str, arch: str,
                       source: str, invocation_overhead_s: float,
                       torch_load_cpu_s: float) -> PlatformProfile:
    """Assemble a platform profile from per-memory fits (both directions at every memory)."""
    by_key = {(fit.memory_mb, fit.direction): fit for fit in fits}
    memories = sorted({fit.memory_mb for fit in fits})
    for memory in memories:
        for direction in DIRECTIONS:
            if (memory, direction) not in by_key:
                raise ValueError(f"no {direction} fit at {memory} MB")
    return PlatformProfile(
        name=name, channel=channel, arch=arch, source=source,
        memory_mb=tuple(memories),
        up_peak=tuple(by_key[m, "up"].peak for m in memories),
        up_rate=tuple(by_key[m, "up"].rate for m in memories),
        down_peak=tuple(by_key[m, "down"].peak for m in memories),
        down_rate=tuple(by_key[m, "down"].rate for m in memories),
        invocation_overhead_s=invocation_overhead_s, torch_load_cpu_s=torch_load_cpu_s,
    )


def relative_time_errors(profile: PlatformProfile, samples: Sequence[TransferSample],
                         direction: Direction) -> NDArray[np.float64]:
    """|predicted − measured| / measured transfer time of every sample under ``profile``."""
    memories = np.array([s.memory_mb for s in samples])
    sizes = np.array([s.object_mb for s in samples])
    measured = np.array([s.seconds(direction) for s in samples])
    predicted = profile.transfer_time(direction, memories, sizes)
    return np.asarray(np.abs(predicted - measured) / measured, dtype=np.float64)


def rounded(profile: PlatformProfile, digits: int = 6) -> PlatformProfile:
    """The profile with p and t kept to ``digits`` significant digits (readable JSON; the
    measurement noise is several percent, so nothing is lost)."""
    def keep(values: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(float(f"{value:.{digits}g}") for value in values)

    return replace(profile, up_peak=keep(profile.up_peak), up_rate=keep(profile.up_rate),
                   down_peak=keep(profile.down_peak), down_rate=keep(profile.down_rate))


# ElastiCache Serverless Valkey has never been profiled here. In the model, an empty object takes
# 1/(p·t) seconds, a round trip: the S3 fit gives 12-56 ms (GET) and 100-150 ms (PUT). An
# in-VPC Valkey command over TLS is about a millisecond, so we assume 2 ms, conservatively.
VALKEY_ROUND_TRIP_S = 0.002


def derive_valkey_profile(s3: PlatformProfile,
                          round_trip_s: float = VALKEY_ROUND_TRIP_S) -> PlatformProfile:
    """Valkey coefficients from an S3 profile: the same peaks p(M) (the function's network
    interface, not the store, caps bandwidth) and rates t(M) = 1/(p(M)·round_trip_s), so small
    shards are not latency-bound. An assumption until someone profiles Valkey."""
    def rates(peaks: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(float(f"{1.0 / (peak * round_trip_s):.6g}") for peak in peaks)

    return replace(
        s3, name=s3.name.replace("-s3", "-valkey"), channel="valkey",
        up_rate=rates(s3.up_peak), down_rate=rates(s3.down_peak),
        provenance={"transfer": VALKEY_TRANSFER_PROVENANCE,
                    "cold_start": group_of(s3.provenance, "cold_start")},
        source=(f"ASSUMPTION until profiled: no Valkey measurements exist. Derived from "
                f"{s3.name!r}: same peak bandwidth p(M) per direction, since the Lambda "
                f"function's network interface is the limit; rate t(M) = 1/(p(M)*{round_trip_s}"
                f" s) so that an empty object costs an assumed {round_trip_s * 1000:g} ms "
                f"in-VPC TLS round trip instead of S3's 12-150 ms. Invocation overhead and "
                f"torch load as S3."))


# Per invocation, what is left of a cold start once the torch load has its own term below:
# Lambda's own init (runtime start, the handlers' light imports) and the first S3 request's
# connection setup (what it was when it also covered torch: docs/cold-start.md).
DEFAULT_INVOCATION_OVERHEAD_S = 0.5
# Per cold start: CPU-seconds (user + sys) of the torch unpack + `import torch` at one full vCPU:
# the median bench/cold_start.py measured at 1769 MB on a development VM, a local measurement,
# not an AWS one (docs/cold-start.md; docs/results.md, "Measurements behind design choices").
DEFAULT_TORCH_LOAD_CPU_S = 9.2
# What those two defaults are (planner/model/inputs/provenance.py): an assumption and a local figure
COLD_START_PROVENANCE = Provenance("chosen", note=(
    "invocation_overhead_s 0.5 s assumed; torch_load_cpu_s measured locally by "
    "bench/cold_start.py (docs/cold-start.md), not on AWS"))
VALKEY_TRANSFER_PROVENANCE = Provenance("provisional", note=(
    "derived from the S3 profile with an assumed 2 ms round trip: no Valkey measurements exist"))
