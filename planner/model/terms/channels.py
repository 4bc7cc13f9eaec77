"""One object per exchange store: what the S3 and the Valkey (ElastiCache Serverless) channel
charge, which rate caps them, and how each shows in a plan's confidence and report.

The planner asks :func:`channel_costs` once per problem (a lookup by the platform's channel)
and never branches on the channel's name: each store's behaviour is a method here
(skypilot's optimizer prices every cloud through one object per provider the same way).

- S3: the exchange pays PUT and GET requests (exchange_cost.py), a worker claims its slot with
  a conditional PUT (segment_requests.py), and S3's 3,500 PUT/DELETE and 5,500 GET per second
  per key prefix cap the exchange (s3_rates.py). Nothing is billed by duration.
- Valkey: the exchange pays ECPUs and data stored by the hour (exchange_cost.py), the cache's
  ECPU/s minimum is metered whether used or not (storage_cost.py), and one cache's ECPU/s
  maximum caps the exchange (cache_throughput.py). A lone worker exchanges nothing, so it is
  planned on S3 instead (no VPC, no cache).

A new channel: a class with :class:`ChannelCosts`'s members, an entry in ``CHANNEL_COSTS``,
its prices in planner/model/inputs/profiles.py ``CHANNEL_PRICES`` and its name in
fasdl.contract.plan ``CHANNELS`` (docs/development.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from planner.model.inputs.problem import VIOLATION_TEXT, FloatArray, IntArray, Problem, Violation
from planner.model.terms.cache_ramp import ramp_extra_s, seconds_to_reach
from planner.model.terms.cache_throughput import (
    ecpus_per_iteration,
    peak_ecpu_per_key,
    peak_ecpu_per_s,
    slot_floors,
)
from planner.model.terms.exchange_cost import s3_exchange_cost, valkey_exchange_cost
from planner.model.terms.exchange_time import SlotFloors
from planner.model.terms.s3_rates import (
    GET_PER_PREFIX_PER_S,
    PUT_PER_PREFIX_PER_S,
    peak_s3_request_rates,
    prefixes_needed,
    s3_utilisation,
)
from planner.model.terms.storage_cost import cache_minimum_cost

BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class ExchangeRates:
    """The exchange's throughput per configuration: Valkey's peak and mean ECPU/s, S3's key
    prefixes and peak PUT-class and GET requests per second per prefix; NaN where the store
    has no such figure."""

    cache_ecpu_per_s_peak: FloatArray
    cache_ecpu_per_s_mean: FloatArray
    s3_key_prefixes: FloatArray
    s3_requests_per_prefix_per_s: FloatArray
    s3_get_per_prefix_per_s: FloatArray
    cache_ecpu_per_s_per_key: FloatArray  # the busiest key's (one hash slot's)


def _nans(shape: tuple[int, ...], count: int) -> list[FloatArray]:
    return [np.full(shape, np.nan) for _ in range(count)]


class ChannelCosts(Protocol):
    """What the planner asks of a store; one implementation per channel."""

    name: str
    # PUTs a worker's claim of its slot costs on S3 (segment_requests.py)
    claim_puts_per_worker: float
    # the binding-constraint code of the store's rate cap
    rate_violation: Violation
    # the channel a lone worker is planned on instead (None: this one)
    lone_worker_channel: str | None

    def exchange_cost(self, problem: Problem, w: IntArray, k: IntArray,
                      total_iterations: FloatArray, time_s: FloatArray) -> FloatArray:
        """USD of the exchange over the run."""
        ...

    def rates(self, problem: Problem, w: IntArray, mem: IntArray, k: IntArray,
              iteration_s: FloatArray) -> ExchangeRates:
        """The exchange's throughput per configuration."""
        ...

    def minimum_cost(self, problem: Problem, w: IntArray, k: IntArray, rates: ExchangeRates,
                     total_iterations: FloatArray, time_s: FloatArray) -> FloatArray:
        """USD the store meters whether used or not."""
        ...

    def ramp_s(self, problem: Problem, w: IntArray, k: IntArray, *, training_s: FloatArray,
               iteration_s: FloatArray, exchange_s: FloatArray) -> FloatArray:
        """Seconds a fresh store's ramp adds to the run; NaN where the store has none."""
        ...

    def prescale_wait_s(self, problem: Problem) -> float:
        """Seconds a run may wait before its first segment for the store's pre-scaled
        minimum instead of paying its ramp (cost_model.py chooses); 0: no such choice."""
        ...

    def slot_floors(self, problem: Problem, w: IntArray, k: IntArray) -> SlotFloors:
        """The fewest seconds a merged shard's publish and downloads take, whatever the
        bandwidth (0: none)."""
        ...

    def over_rate_limit(self, problem: Problem, rates: ExchangeRates) -> BoolArray:
        """Configurations whose exchange exceeds the store's rate cap."""
        ...

    def within_rate_limit(self, problem: Problem, w: IntArray, memory_mb: IntArray | int,
                          k: IntArray) -> BoolArray:
        """(W, M, K) triples the exact search may keep: False only where every configuration
        of the triple exceeds the cap (planner/search/bounds.py)."""
        ...

    def lifted(self, problem: Problem) -> Problem | None:
        """``problem`` without the store's rate cap, to ask whether it binds; None if none
        is in force."""
        ...

    def limit_reason(self, problem: Problem, lifted_best: ExchangeRates) -> str:
        """Why no plan is feasible, given the best plan without the cap."""
        ...

    def duration_billed_usd(self, breakdown: Mapping[str, float]) -> float:
        """The part of the store's cost billed by the run's duration (confidence.py)."""
        ...

    def cost_line_extra(self, breakdown: Mapping[str, float]) -> str:
        """The store's own entry in the report's cost line."""
        ...

    def report_lines(self, problem: Problem, breakdown: Mapping[str, float]) -> list[str]:
        """The exchange's throughput against the store's cap, for the report."""
        ...


class S3Costs:
    """S3 as the exchange store: requests, and S3's request rates per key prefix."""

    name = "s3"
    claim_puts_per_worker = 1.0  # a conditional PUT each
    rate_violation = Violation.S3_REQUEST_RATE
    lone_worker_channel: str | None = None

    def exchange_cost(self, problem: Problem, w: IntArray, k: IntArray,
                      total_iterations: FloatArray, time_s: FloatArray) -> FloatArray:
        return s3_exchange_cost(problem.prices, w, k, total_iterations, problem.exchange_chunks)

    def rates(self, problem: Problem, w: IntArray, mem: IntArray, k: IntArray,
              iteration_s: FloatArray) -> ExchangeRates:
        # P: the fewest prefixes within S3's rates, up to the plan's cap
        puts, gets = peak_s3_request_rates(problem, w, mem, k)
        prefixes = np.minimum(prefixes_needed(puts, gets),
                              problem.max_exchange_key_prefixes).astype(np.float64)
        peak, mean, per_key = _nans(w.shape, 3)
        return ExchangeRates(peak, mean, prefixes, puts / prefixes, gets / prefixes, per_key)

    def minimum_cost(self, problem: Problem, w: IntArray, k: IntArray, rates: ExchangeRates,
                     total_iterations: FloatArray, time_s: FloatArray) -> FloatArray:
        return np.zeros(np.shape(time_s), dtype=np.float64)

    def ramp_s(self, problem: Problem, w: IntArray, k: IntArray, *, training_s: FloatArray,
               iteration_s: FloatArray, exchange_s: FloatArray) -> FloatArray:
        return np.full(np.shape(training_s), np.nan)  # S3 scales per prefix, not modelled

    def prescale_wait_s(self, problem: Problem) -> float:
        return 0.0

    def slot_floors(self, problem: Problem, w: IntArray, k: IntArray) -> SlotFloors:
        return SlotFloors()  # S3's per-prefix request rates: rates()

    def over_rate_limit(self, problem: Problem, rates: ExchangeRates) -> BoolArray:
        puts, gets = rates.s3_requests_per_prefix_per_s, rates.s3_get_per_prefix_per_s
        if not problem.s3_request_limits:
            return np.zeros(puts.shape, dtype=bool)
        # P = ceil(rate/limit) leaves each prefix at the limit at most, up to rounding
        return np.asarray(s3_utilisation(puts, gets) > 1.0 + 1e-9, dtype=bool)

    def within_rate_limit(self, problem: Problem, w: IntArray, memory_mb: IntArray | int,
                          k: IntArray) -> BoolArray:
        return np.ones(w.shape, dtype=bool)  # more prefixes absorb most of it: no cut

    def lifted(self, problem: Problem) -> Problem | None:
        return replace(problem, s3_request_limits=False) if problem.s3_request_limits else None

    def limit_reason(self, problem: Problem, lifted_best: ExchangeRates) -> str:
        return (f"{VIOLATION_TEXT[self.rate_violation]} (over "
                f"{problem.max_exchange_key_prefixes} prefix(es) at most; the best plan "
                "without the limit asks "
                f"{float(lifted_best.s3_requests_per_prefix_per_s[0]):,.0f} PUT/DELETE and "
                f"{float(lifted_best.s3_get_per_prefix_per_s[0]):,.0f} GET per second of "
                "each)")

    def duration_billed_usd(self, breakdown: Mapping[str, float]) -> float:
        return 0.0

    def cost_line_extra(self, breakdown: Mapping[str, float]) -> str:
        return ""

    def report_lines(self, problem: Problem, breakdown: Mapping[str, float]) -> list[str]:
        b = breakdown
        if "s3_requests_per_prefix_per_s" not in b:
            return []
        puts, gets = b["s3_requests_per_prefix_per_s"], b["s3_get_per_prefix_per_s"]
        return [f"    S3 peak requests per key prefix ({b['s3_key_prefixes']:.0f} prefixes): "
                f"{puts:,.0f} PUT/DELETE/s of {PUT_PER_PREFIX_PER_S:,.0f}, {gets:,.0f} GET/s "
                f"of {GET_PER_PREFIX_PER_S:,.0f} ({float(s3_utilisation(puts, gets)):.0%})"]


class ValkeyCosts:
    """ElastiCache Serverless (Valkey) as the exchange store: ECPUs, data stored by the hour,
    the ECPU/s minimum, and one cache's ECPU/s maximum."""

    name = "valkey"
    claim_puts_per_worker = 0.0  # a SET NX, within the cache's ECPU rounding
    rate_violation = Violation.CACHE_THROUGHPUT
    # W = 1 exchanges nothing, yet would deploy a VPC and a cache (the synth refuses it)
    lone_worker_channel: str | None = "s3"

    def exchange_cost(self, problem: Problem, w: IntArray, k: IntArray,
                      total_iterations: FloatArray, time_s: FloatArray) -> FloatArray:
        return valkey_exchange_cost(problem.prices, problem.workload.model_mb, w, k,
                                    total_iterations, time_s, problem.exchange_chunks,
                                    problem.upload_share)

    def rates(self, problem: Problem, w: IntArray, mem: IntArray, k: IntArray,
              iteration_s: FloatArray) -> ExchangeRates:
        peak = peak_ecpu_per_s(problem, w, mem, k)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(iteration_s > 0,
                            ecpus_per_iteration(problem, w, k) / iteration_s, 0.0)
        prefixes, puts, gets = _nans(w.shape, 3)
        return ExchangeRates(peak, np.asarray(mean, dtype=np.float64), prefixes, puts, gets,
                             peak_ecpu_per_key(problem, w, mem, k))

    def minimum_cost(self, problem: Problem, w: IntArray, k: IntArray, rates: ExchangeRates,
                     total_iterations: FloatArray, time_s: FloatArray) -> FloatArray:
        consumed = ecpus_per_iteration(problem, w, k) * total_iterations
        return cache_minimum_cost(problem.prices, mean_ecpu_per_s=rates.cache_ecpu_per_s_mean,
                                  peak_ecpu_per_s=rates.cache_ecpu_per_s_peak,
                                  consumed_ecpus=consumed, time_s=time_s)

    def ramp_s(self, problem: Problem, w: IntArray, k: IntArray, *, training_s: FloatArray,
               iteration_s: FloatArray, exchange_s: FloatArray) -> FloatArray:
        if problem.cache_warm:
            return np.zeros(np.shape(training_s), dtype=np.float64)
        platform = problem.platform
        return ramp_extra_s(training_s=training_s, iteration_s=iteration_s,
                            exchange_s=exchange_s,
                            ecpus_per_iteration=ecpus_per_iteration(problem, w, k),
                            fresh_ecpu_per_s=platform.cache_fresh_ecpu_per_s,
                            doubling_s=platform.cache_ramp_doubling_s)

    def prescale_wait_s(self, problem: Problem) -> float:
        return 0.0 if problem.cache_warm else problem.platform.cache_prescale_s

    def slot_floors(self, problem: Problem, w: IntArray, k: IntArray) -> SlotFloors:
        return slot_floors(problem, w, k)

    def over_rate_limit(self, problem: Problem, rates: ExchangeRates) -> BoolArray:
        return np.asarray(rates.cache_ecpu_per_s_peak > problem.max_cache_ecpu_per_s,
                          dtype=bool)

    def within_rate_limit(self, problem: Problem, w: IntArray, memory_mb: IntArray | int,
                          k: IntArray) -> BoolArray:
        if problem.max_cache_ecpu_per_s == math.inf:
            return np.ones(w.shape, dtype=bool)
        # the peak depends on (W, M, K) alone, exactly evaluate()'s
        peak = peak_ecpu_per_s(problem, w, memory_mb, k)
        return np.asarray(peak <= problem.max_cache_ecpu_per_s, dtype=bool)

    def lifted(self, problem: Problem) -> Problem | None:
        if problem.max_cache_ecpu_per_s == math.inf:
            return None
        return replace(problem, max_cache_ecpu_per_s=math.inf)

    def limit_reason(self, problem: Problem, lifted_best: ExchangeRates) -> str:
        peak = float(lifted_best.cache_ecpu_per_s_peak[0])
        return (f"{VIOLATION_TEXT[self.rate_violation]} (cap "
                f"{problem.max_cache_ecpu_per_s:,.0f} ECPU/s; the best plan without it peaks "
                f"at {peak:,.0f} ECPU/s)")

    def duration_billed_usd(self, breakdown: Mapping[str, float]) -> float:
        # data stored by the hour and the ECPU/s minimum both scale with the run's duration
        return breakdown.get("exchange_usd", 0.0) + breakdown.get("cache_minimum_usd", 0.0)

    def cost_line_extra(self, breakdown: Mapping[str, float]) -> str:
        return f", cache minimum ${breakdown['cache_minimum_usd']:.4f}"

    def report_lines(self, problem: Problem, breakdown: Mapping[str, float]) -> list[str]:
        b = breakdown
        if "cache_ecpu_per_s_peak" not in b:
            return []
        return [f"    cache throughput: peak {b['cache_ecpu_per_s_peak']:,.0f} ECPU/s, mean "
                f"{b['cache_ecpu_per_s_mean']:,.0f} ECPU/s (cap "
                f"{problem.max_cache_ecpu_per_s:,.0f} ECPU/s)", _ramp_line(problem, b),
                *_hot_key_lines(problem, b)]


def _hot_key_lines(problem: Problem, b: Mapping[str, float]) -> list[str]:
    """The busiest key against one hash slot's ceiling (cache_throughput.py)."""
    per_key, slot = b.get("cache_ecpu_per_s_per_key"), problem.platform.cache_slot_ecpu_per_s
    if per_key is None or per_key <= slot:
        return []
    return [f"    hot key: each merged shard is one key that every other worker reads, "
            f"{per_key:,.0f} ECPU/s at the network's speed, above ElastiCache's ~{slot:,.0f} "
            f"per hash slot: the download phase is charged at the slot's rate, "
            f"{per_key / slot:.1f}x as long (more exchange chunks or aggregators spread it)"]


def _ramp_line(problem: Problem, b: Mapping[str, float]) -> str:
    """What a fresh cache's ramp costs the plan (planner/model/terms/cache_ramp.py)."""
    if problem.cache_warm:
        return ("    cache ramp: none charged (--cache-warm: the cache already serves its "
                "ECPU/s minimum)")
    platform = problem.platform
    if b.get("cache_wait_s", 0.0) > 0:
        return (f"    cache start: the first segment waits until the cache is "
                f"{b['cache_wait_s']:,.0f} s old, when its pre-scaled ECPU/s minimum is in "
                "force (AWS: within 60 minutes), cheaper here than starting at once on a fresh "
                "cache's ramp; the wait's cache charges are in the cost, no Lambda runs")
    fresh, doubling = platform.cache_fresh_ecpu_per_s, platform.cache_ramp_doubling_s
    reach = float(seconds_to_reach(b["cache_ecpu_per_s_peak"], fresh_ecpu_per_s=fresh,
                                   doubling_s=doubling))
    return (f"    cache ramp: a fresh cache serves {fresh:,.0f} ECPU/s, doubling every "
            f"{doubling:,.0f} s: the peak after {reach:,.0f} s; the ramp adds "
            f"{b.get('cache_ramp_s', 0.0):,.1f} s (${b.get('cache_ramp_usd', 0.0):.4f} of "
            "Lambda time) to the first segment (--cache-warm when it already runs)")


# typed as the protocol, so mypy checks that each class implements every member
STORES: tuple[ChannelCosts, ...] = (S3Costs(), ValkeyCosts())
CHANNEL_COSTS: Mapping[str, ChannelCosts] = {store.name: store for store in STORES}


def channel_costs(problem: Problem) -> ChannelCosts:
    """The store of ``problem``'s channel."""
    return CHANNEL_COSTS[problem.channel]

