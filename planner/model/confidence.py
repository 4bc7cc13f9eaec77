"""How far a plan's predicted time and cost can be trusted, from where its inputs come from.

Every coefficient group of the workload (``compute``: a, b, m; ``memory``: k, c) and of the
platform (``transfer``: p, t; ``cold_start``) has a provenance (planner/model/inputs/provenance.py).
Each group gets a relative error band δ:

* ``measured`` on AWS Lambda (platform ``aws-lambda…``): the fit's max relative error, at least
  MEASURED_BAND = 8 %, the goal bench.prediction holds the model to (it measured at most 6.1 %
  against runs of fitted profiles: docs/results.md, "Prediction accuracy, measured");
* ``measured`` elsewhere (``local-emulation``: a machine under Lambda emulation) and ``paper``
  (measured by others, on their runtime): PAPER_BAND = 30 %, or the fit's error if larger;
* ``chosen`` (a stated rule or assumption): CHOSEN_BAND = 50 %;
* ``provisional`` (a guess; also every profile that records no provenance): PROVISIONAL_BAND =
  100 %, a factor of two either way.

A group is ``extrapolated`` when the plan's memory lies outside what it was measured at (the
workload's ``profiled_memory_mb``, the platform's ``memory_mb`` span): its band doubles.

The predicted time T = cold start + segments·(load + checkpoint) + iterations. The cold start
carries the ``cold_start`` band, the segments' loads and checkpoints the ``transfer`` band, and
the iterations a mix: the share s = slowest role's training / iteration time carries
``compute``, the rest ``transfer``. The time's band δ_T is the time-weighted sum of the parts'
bands: errors are added, not combined in quadrature, since one machine's or one network's error
moves every part the same way. The range is [T/(1+δ_T), T·(1+δ_T)]: a factor, so that a band of
100 % or more still keeps the low end above 0, and low <= T <= high for every δ >= 0.

The cost scales with the time only where AWS bills by duration: Lambda's GB-seconds ("Duration
is calculated from the time your code begins executing until it returns":
https://docs.aws.amazon.com/whitepapers/latest/how-aws-pricing-works/lambda.html) and, on
Valkey, the cache's data stored, billed in GB-hours (https://aws.amazon.com/elasticache/pricing/;
AWS Database Blog, "Unlock on-demand, cost-optimized performance with Amazon ElastiCache
Serverless"), in the exchange cost, and the ECPU/s minimum it is pre-scaled to
(planner/model/terms/storage_cost.py). Requests, transitions, S3's exchange and
storage are counted from the configuration at list prices. With C_t the duration-billed part,
the cost's range is C − C_t + C_t·[1/(1+δ_T), 1+δ_T]. The memory group moves no prediction: a
``memory`` group that is not measured is listed, since the planned batch may not fit.

The point prediction stays the model's; the band only says how far it may be off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from planner.model.inputs.platform_profile import PlatformProfile
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import WorkloadProfile
from planner.model.inputs.provenance import (
    PLATFORM_GROUPS,
    WORKLOAD_GROUPS,
    Provenance,
    group_of,
)
from planner.model.terms.channels import ChannelCosts, channel_costs

MEASURED_BAND = 0.08
PAPER_BAND = 0.30
CHOSEN_BAND = 0.50
PROVISIONAL_BAND = 1.00
EXTRAPOLATION_FACTOR = 2.0
KIND_BANDS = {"paper": PAPER_BAND, "chosen": CHOSEN_BAND, "provisional": PROVISIONAL_BAND}
AWS_LAMBDA = "aws-lambda"  # measured platforms whose name starts so were measured on Lambda
RULE = "docs/reference.md#confidence"


def band(provenance: Provenance, extrapolated: bool = False) -> float:
    """The group's relative error band δ (module docstring)."""
    if provenance.measured:
        on_lambda = (provenance.platform or "").startswith(AWS_LAMBDA)
        base = MEASURED_BAND if on_lambda else PAPER_BAND
    else:
        base = KIND_BANDS[provenance.kind]
    fitted = max(base, provenance.max_relative_error or 0.0)
    return fitted * (EXTRAPOLATION_FACTOR if extrapolated else 1.0)


def extrapolation_warnings(workload: WorkloadProfile, memory_mb: float) -> list[str]:
    """A memory outside the profiled range extrapolates the workload's fit: say so."""
    profiled = workload.profiled_memory_mb
    if not profiled or profiled[0] <= memory_mb <= profiled[1]:
        return []
    return [f"M = {memory_mb} MB is outside the memories the workload was profiled at "
            f"({profiled[0]:g}-{profiled[1]:g} MB): its time and memory are extrapolated; "
            f"profile up to it (python -m local profile --memories ...) to trust them"]


@dataclass(frozen=True)
class Input:
    """One coefficient group of the plan's profiles, its provenance and band."""

    name: str  # workload.compute, platform.transfer, ...
    provenance: Provenance
    extrapolated: bool
    band: float

    def to_dict(self) -> dict[str, Any]:
        return {**self.provenance.to_dict(), "extrapolated": self.extrapolated,
                "relative_error": round(self.band, 4)}


@dataclass(frozen=True)
class Confidence:
    inputs: tuple[Input, ...]
    time_s: float
    cost_usd: float
    time_band: float  # δ_T
    cost_band: float  # δ_C, relative to the cost
    time_range: tuple[float, float]
    cost_range: tuple[float, float]
    warnings: list[str] = field(default_factory=list)

    def named(self, kind: str) -> list[str]:
        return [i.name for i in self.inputs if i.provenance.kind == kind]

    @property
    def not_measured(self) -> list[str]:
        return [i.name for i in self.inputs if not i.provenance.measured]

    @property
    def extrapolated(self) -> list[str]:
        return [i.name for i in self.inputs if i.extrapolated]

    @property
    def failed_fit(self) -> list[str]:
        return [i.name for i in self.inputs if i.provenance.failed_fit]

    def to_dict(self) -> dict[str, Any]:
        return {
            "not_measured": self.not_measured, "provisional": self.named("provisional"),
            "extrapolated": self.extrapolated, "failed_fit": self.failed_fit,
            "fit_error": {i.name: i.provenance.max_relative_error for i in self.inputs
                          if i.provenance.max_relative_error is not None},
            "time_s": {"low": round(self.time_range[0], 3),
                       "high": round(self.time_range[1], 3)},
            "cost_usd": {"low": round(self.cost_range[0], 6),
                         "high": round(self.cost_range[1], 6)},
            "relative_error": {"time": round(self.time_band, 4),
                               "cost": round(self.cost_band, 4)},
            "inputs": {i.name: i.to_dict() for i in self.inputs},
            "warnings": self.warnings, "rule": RULE}

    def headline(self) -> list[str]:
        """What the printed plan says first: a fit kept below the profiler's gates, and
        provisional inputs (else nothing)."""
        lines = [f"FAILED FIT: {name}'s fit is below the profiler's quality gates "
                 f"({self._by_name(name).describe()}): profile again "
                 f"(docs/profiling.md, 'Quality gates') before trusting this plan"
                 for name in self.failed_fit]
        provisional = self.named("provisional")
        if not provisional:
            return lines
        return [*lines, f"PROVISIONAL prediction: {', '.join(provisional)} not measured "
                        f"(provisional); the time may be off by ±{self.time_band:.0%} (the "
                        f"likely range below): profile (docs/profiling.md) before trusting it"]

    def _by_name(self, name: str) -> Provenance:
        return next(i.provenance for i in self.inputs if i.name == name)

    def range_line(self) -> str:
        low_t, high_t = self.time_range
        low_c, high_c = self.cost_range
        basis = ", ".join(f"{i.name.split('.')[1]} {i.provenance.kind}"
                          + (" extrapolated" if i.extrapolated else "")
                          + (" failed-fit" if i.provenance.failed_fit else "")
                          for i in self.inputs)
        return (f"    likely range: time {low_t:,.0f}-{high_t:,.0f} s (±{self.time_band:.0%}), "
                f"cost ${low_c:.4f}-${high_c:.4f}; inputs: {basis}")


def _inputs(workload: WorkloadProfile, platform: PlatformProfile,
            memory_mb: float) -> tuple[Input, ...]:
    workload_outside = bool(extrapolation_warnings(workload, memory_mb))
    platform_outside = not platform.memory_mb[0] <= memory_mb <= platform.memory_mb[-1]
    inputs = []
    for owner, groups, provenance, outside in (
            ("workload", WORKLOAD_GROUPS, workload.provenance, workload_outside),
            ("platform", PLATFORM_GROUPS, platform.provenance, platform_outside)):
        for group in groups:
            entry = group_of(provenance, group)
            # the memory-dependent fits: compute a·(B+b)/(M+m) and the per-memory p, t
            extrapolated = outside and group in ("compute", "transfer")
            inputs.append(Input(f"{owner}.{group}", entry, extrapolated,
                                band(entry, extrapolated)))
    return tuple(inputs)


def time_band(bands: Mapping[str, float], breakdown: Mapping[str, float], time_s: float,
              segments: int) -> float:
    """δ_T: the parts of the predicted time weighted by their share (module docstring)."""
    if time_s <= 0:
        return 0.0
    startup = breakdown.get("cold_start_s", 0.0)
    segment_io = segments * (breakdown.get("load_s", 0.0) + breakdown.get("checkpoint_s", 0.0))
    iterations = max(0.0, time_s - startup - segment_io)
    iteration = breakdown.get("iteration_s", 0.0)
    training = max(breakdown.get("train_aggregator_s", 0.0),
                   breakdown.get("train_non_aggregator_s", 0.0))
    share = min(1.0, training / iteration) if iteration > 0 else 1.0
    transfer, compute = bands["platform.transfer"], bands["workload.compute"]
    weighted = (startup * bands["platform.cold_start"] + segment_io * transfer
                + iterations * (share * compute + (1.0 - share) * transfer))
    return weighted / max(time_s, startup + segment_io)


def time_scaled_cost(breakdown: Mapping[str, float], store: ChannelCosts) -> float:
    """The part of the cost AWS bills by duration: Lambda's, and the store's (Valkey's storage
    and minimum)."""
    return breakdown.get("lambda_compute_usd", 0.0) + store.duration_billed_usd(breakdown)


def ranges(time_s: float, cost_usd: float, scaled_cost: float, delta: float
           ) -> tuple[tuple[float, float], tuple[float, float]]:
    """([T/(1+δ), T·(1+δ)], the cost's with only ``scaled_cost`` scaled)."""
    fixed = max(0.0, cost_usd - scaled_cost)
    return ((time_s / (1.0 + delta), time_s * (1.0 + delta)),
            (fixed + scaled_cost / (1.0 + delta), fixed + scaled_cost * (1.0 + delta)))


class Predicted(Protocol):
    """What confidence needs of a search's choice (planner.search.searches.Choice)."""

    @property
    def memory_mb(self) -> int: ...
    @property
    def time_s(self) -> float: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def breakdown(self) -> dict[str, float]: ...
    @property
    def segments(self) -> int: ...


def assess(problem: Problem, choice: Predicted) -> Confidence:
    """The confidence section of the plan of ``choice``."""
    workload, platform = problem.workload, problem.platform
    inputs = _inputs(workload, platform, choice.memory_mb)
    delta = time_band({i.name: i.band for i in inputs}, choice.breakdown, choice.time_s,
                      choice.segments)
    time_range, cost_range = ranges(choice.time_s, choice.cost_usd,
                                    time_scaled_cost(choice.breakdown,
                                                     channel_costs(problem)), delta)
    cost = choice.cost_usd
    cost_band = (cost_range[1] - cost) / cost if cost > 0 else 0.0
    return Confidence(inputs, choice.time_s, cost, delta, cost_band, time_range, cost_range,
                      extrapolation_warnings(workload, choice.memory_mb))
