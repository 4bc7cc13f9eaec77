"""Online calibration (issue 42, step 1): at a segment boundary, the coefficients the segments
measured so far identify, refitted, weighted toward the recent ones.

Per segment the run has, per role, what fasdl.run.role_times reports: compute and exchange
seconds per iteration at the role's batch and the run's memory M, the first segment's cold
starts and later segments' warm starts. From those:

* **compute** T = a·(B+b)/(M+m): the weighted mean of each role's compute per iteration
  (weights: iterations × 2^(−age/HALF_LIFE_SEGMENTS), age in segments before the newest) as
  one point per role, refitted by planner calibrate's rules (planner/fit/refit.py): one
  memory size, so m is kept; a and b apart when the roles train different batches (B^n > B^a),
  else a alone. The CPU a step and the exchange's client use (the model's CPU bound,
  planner/model/terms/client_cpu.py: cpu_step_s, cpu_sample_s and the platform's CPU_FIELDS)
  scale by the refitted over the planned compute time at those points: a platform slower in
  compute is slower in all of its CPU (before, a plan made on a profile 2x slower than the
  run's platform kept predicting CPU-bound iterations 2x slower after the refit).
* **exchange** e: the aggregators' measured exchange per iteration (upload, aggregate,
  download and waits) over the plan's predicted one; the platform's transfer peaks at every
  memory divided by it (S MB take S/tp, tp proportional to the peak p(M);
  :func:`scaled_transfers`). The run moves one shard size at one memory size, so the
  saturation rates t(M) are not identified and keep their values. The non-aggregators'
  exchange holds their wait for the aggregators, so it identifies nothing.
* **cold start**: the first segment's cold starts, by planner calibrate's rules (one memory
  size: torch_load_cpu_s at the profile's invocation overhead).
* **segment overhead**: the run's clock over the segments at this configuration
  (:class:`ClockWindow`, warm segments only once a boundary after the first recorded its
  clock) less what the refitted model charges them, per segment: the state machine's steps and
  invocations between segments, which no worker measures (:func:`segment_overhead_s`).

A coefficient the segments cannot identify keeps its planned value, and the result says so
(:attr:`OnlineFit.kept`), as planner calibrate does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from planner.fit.refit import RolePoint, refit_cold_start, refit_compute
from planner.model.inputs.platform_profile import CPU_FIELDS, MAX_SEGMENT_OVERHEAD_S
from planner.model.inputs.profiles import PlatformProfile, WorkloadProfile

HALF_LIFE_SEGMENTS = 2.0  # a segment counts half as much as the one two segments later
AGGREGATOR, NON_AGGREGATOR = "aggregator", "non_aggregator"  # fasdl.run.role_times.ROLES


class CalibrationError(ValueError):
    """Segment measurements that cannot be read; the message names the field."""


@dataclass(frozen=True)
class SegmentRoles:
    """One finished segment: its index and fasdl.run.role_times' figures per role."""

    index: int
    roles: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class OnlineFit:
    """The refitted profiles, the exchange factor applied, and every coefficient kept."""

    workload: WorkloadProfile
    platform: PlatformProfile
    exchange_factor: float  # measured / predicted aggregator exchange (1: kept)
    kept: tuple[str, ...]


def recency_weights(indices: Sequence[int]) -> list[float]:
    """2^(−age/HALF_LIFE_SEGMENTS), age = the newest index − index."""
    newest = max(indices)
    return [2.0 ** (-(newest - index) / HALF_LIFE_SEGMENTS) for index in indices]


def _figure(segment: SegmentRoles, role: str, name: str) -> float | None:
    value = segment.roles.get(role, {}).get(name)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise CalibrationError(f"segment {segment.index}: roles.{role}.{name} must be a "
                               f"number >= 0, got {value!r}")
    return float(value)


def weighted_per_iteration(segments: Sequence[SegmentRoles], role: str, name: str
                           ) -> tuple[float, int] | None:
    """The recency- and iteration-weighted mean of ``name`` (seconds per iteration) of
    ``role``, and the iterations behind it; None when no segment measured it."""
    found = [(segment.index, value, int(_figure(segment, role, "iterations") or 0))
             for segment in segments
             if (value := _figure(segment, role, name)) is not None]
    found = [item for item in found if item[2] > 0]
    if not found:
        return None
    weights = recency_weights([index for index, _, _ in found])
    total = sum(weight * iterations for weight, (_, _, iterations) in zip(weights, found,
                                                                        strict=True))
    mean = sum(weight * iterations * value for weight, (_, value, iterations)
               in zip(weights, found, strict=True)) / total
    return mean, sum(iterations for _, _, iterations in found)


def _role_points(segments: Sequence[SegmentRoles], memory_mb: int,
                 batches: Mapping[str, int]) -> list[RolePoint]:
    """One point per role that measured its compute; the cold start from the first segment
    (fresh sandboxes), when the segments include it."""
    first = min(segments, key=lambda segment: segment.index)
    where = f"segments {first.index}-{max(s.index for s in segments)}"
    points = []
    for role, batch in batches.items():
        compute = weighted_per_iteration(segments, role, "compute_s_per_iteration")
        if compute is None:
            continue
        cold = _figure(first, role, "cold_start_s") if first.index == 0 else None
        points.append(RolePoint(where=f"{where} roles.{role}", memory_mb=float(memory_mb),
                                batch=batch, iterations=compute[1], compute_s=compute[0],
                                cold_start_s=cold))
    return points


def scaled_cpu(platform: PlatformProfile, factor: float) -> PlatformProfile:
    """``platform`` with the exchange's client CPU (CPU_FIELDS) ``factor`` times as much."""
    if factor <= 0:
        raise CalibrationError(f"CPU factor must be > 0, got {factor}")
    changes: dict[str, Any] = {name: float(f"{getattr(platform, name) * factor:.6g}")
                               for name in CPU_FIELDS}
    return replace(platform, **changes)


def scaled_transfers(platform: PlatformProfile, factor: float) -> PlatformProfile:
    """``platform`` with every transfer ``factor`` times as long: the peaks divided by it."""
    if factor <= 0:
        raise CalibrationError(f"exchange factor must be > 0, got {factor}")
    return replace(platform, up_peak=tuple(p / factor for p in platform.up_peak),
                   down_peak=tuple(p / factor for p in platform.down_peak))


def online_fit(workload: WorkloadProfile, platform: PlatformProfile,
               segments: Sequence[SegmentRoles], *, memory_mb: int,
               batches: Mapping[str, int], predicted_exchange_s: float,
               measured_on: str) -> OnlineFit:
    """The module docstring's refit from ``segments`` (oldest first), at the deployed
    ``memory_mb`` with each role's batch (``batches``: role -> B) and the plan's predicted
    aggregator exchange per iteration."""
    if not segments:
        raise CalibrationError("no finished segment to calibrate from")
    points = _role_points(segments, memory_mb, batches)
    kept: list[str] = []
    if points:
        compute = refit_compute(workload, points, measured_on)
        workload, kept = compute.profile, [*kept, *compute.kept]
        platform = scaled_cpu(platform, compute.cpu_factor)
        cold = refit_cold_start(platform, points, measured_on)
        platform, kept = cold.profile, [*kept, *cold.kept]
    else:
        kept.append("compute and cold start kept: no segment recorded a role's times")
    exchange = weighted_per_iteration(segments, AGGREGATOR, "exchange_s_per_iteration")
    factor = 1.0
    if exchange is None or predicted_exchange_s <= 0:
        kept.append("exchange kept: no aggregator exchange measured or none predicted")
    else:
        factor = exchange[0] / predicted_exchange_s
        platform = scaled_transfers(platform, factor)
    return OnlineFit(workload, platform, factor, tuple(kept))


@dataclass(frozen=True)
class ClockWindow:
    """The run's clock over finished segments at the current configuration: how many, their
    iterations and seconds, and whether the first of them started the configuration's
    sandboxes (its cold start is in those seconds)."""

    segments: int
    iterations: int
    elapsed_s: float
    cold: bool


def segment_overhead_s(window: ClockWindow, *, iteration_s: float, cold_start_s: float,
                       load_and_checkpoint_s: float) -> float:
    """Seconds per segment the clock shows beyond what the refitted model charges its
    iterations, loads, checkpoints and (``window.cold``) its cold start: the steps and
    invocations between segments (PlatformProfile.segment_overhead_s), at least 0."""
    if window.segments < 1:
        raise CalibrationError(f"clock window: segments must be >= 1, got {window.segments}")
    charged = (window.iterations * iteration_s + window.segments * load_and_checkpoint_s
               + (cold_start_s if window.cold else 0.0))
    return min(MAX_SEGMENT_OVERHEAD_S, max(0.0, (window.elapsed_s - charged) / window.segments))
