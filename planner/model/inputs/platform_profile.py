"""A platform profile: how fast one channel moves bytes at each Lambda memory size, what a cold
start costs, and the client's CPU per request and MB (FasDL Eq. 2: tp = p(M)·(1 − e^(−t(M)·S))).

Split from planner/model/inputs/profiles.py, which re-exports every name here. Every invalid
field raises ProfileError naming the field; ``provenance`` (planner/model/inputs/provenance.py)
says where the ``transfer`` and ``cold_start`` coefficients come from.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fasdl.contract.cache import MAX_CACHE_WAIT_S, MAX_ECPU_PER_SECOND
from fasdl.contract.fields import require_choice, require_pattern
from fasdl.contract.plan import ARCHITECTURES, CHANNELS, IDENTIFIER
from planner.model.inputs.profile_fields import (
    ProfileError,
    bad,
    construct,
    number,
    series,
    set_field,
)
from planner.model.inputs.provenance import (
    PLATFORM_GROUPS,
    Provenance,
    parse_provenance,
    provenance_dict,
)


def sizes(size_mb: ArrayLike) -> NDArray[np.float64]:
    """Object sizes in MB as an array; a negative one is an error naming ``size_mb``."""
    size = np.asarray(size_mb, dtype=np.float64)
    if np.any(size < 0):
        raise ProfileError(f"object size must be >= 0 MB, got {size_mb!r}", "size_mb")
    return size


Direction = Literal["up", "down"]
DIRECTIONS: tuple[Direction, Direction] = ("up", "down")


# Lambda's CPU: one vCPU per 1,769 MB, linear in memory, at most 6 (10,240 MB); AWS
# resource-model.html. local/lambda_/lambda_speed.py caps emulated invocations with the same
# numbers.
LAMBDA_MB_PER_VCPU = 1769.0
LAMBDA_MAX_VCPUS = 6.0
# The torch load (zstd stream + tar extraction, then `import torch`) runs on one thread:
# uncapped it keeps less than one CPU busy (measured: docs/cold-start.md), so vCPUs past one do
# not help.
TORCH_LOAD_THREADS = 1.0


FRESH_CACHE_ECPU_PER_S, CACHE_RAMP_DOUBLING_S = 30_000.0, 150.0
PRESCALE_S = 3_600.0  # a pre-scaled minimum is in force "within 60 minutes" (the same page)
SLOT_ECPU_PER_S = 30_000.0  # one hash slot's ceiling (planner/model/terms/cache_throughput.py)
# AWS's documented figures: left out of profile files at these values
CACHE_DEFAULTS = {"cache_fresh_ecpu_per_s": FRESH_CACHE_ECPU_PER_S,
                  "cache_ramp_doubling_s": CACHE_RAMP_DOUBLING_S,
                  "cache_prescale_s": PRESCALE_S,
                  "cache_slot_ecpu_per_s": SLOT_ECPU_PER_S}

MAX_SEGMENT_OVERHEAD_S = 900.0  # a segment's overhead beyond Lambda's longest invocation: a bad fit
CPU_FIELDS = ("cpu_up_request_s", "cpu_up_mb_s", "cpu_down_request_s", "cpu_down_mb_s",
              "cpu_fold_mb_s", "cpu_bf16_frame_mb_s", "cpu_bf16_fold_mb_s")


@dataclass(frozen=True)
class PlatformProfile:
    """Per-memory transfer coefficients of one channel: tp = p(M)·(1 − e^(−t(M)·S)) MB/s."""

    name: str
    channel: str
    arch: str
    source: str
    memory_mb: tuple[float, ...]
    up_peak: tuple[float, ...]
    up_rate: tuple[float, ...]
    down_peak: tuple[float, ...]
    down_rate: tuple[float, ...]
    invocation_overhead_s: float  # per invocation: Lambda's own init and the first request
    torch_load_cpu_s: float  # per cold start: torch unpack + import, CPU-s at one vCPU
    # Per memory, how far an upload and a download overlap (planner/model/terms/pipelined.py's
    # d: 1 = full duplex, 0 = one shared link); () = full duplex everywhere (not profiled).
    duplex: tuple[float, ...] = ()
    # The client's CPU seconds (at one vCPU) per request and per MB each way, and per MB an
    # aggregator folds; profiled, 0 = not measured (planner/model/terms/exchange_time.py's CPU
    # bound).
    cpu_up_request_s: float = 0.0
    cpu_up_mb_s: float = 0.0
    cpu_down_request_s: float = 0.0
    cpu_down_mb_s: float = 0.0
    cpu_fold_mb_s: float = 0.0
    cpu_bf16_frame_mb_s: float = 0.0  # per MB of float32 values framed as a bfloat16 upload
    cpu_bf16_fold_mb_s: float = 0.0  # per MB of float32 values folded from a bfloat16 copy
    # A fresh ElastiCache Serverless cache (Valkey channel; planner/model/terms/cache_ramp.py):
    # the ECPU/s it serves at first and the seconds it takes to double. AWS's "Scaling
    # ElastiCache" page, pre-scaling: about 30,000 ECPU/s, doubling about every 2-3 minutes on
    # Valkey 8 (the middle, 150 s); not measured here
    cache_fresh_ecpu_per_s: float = FRESH_CACHE_ECPU_PER_S
    cache_ramp_doubling_s: float = CACHE_RAMP_DOUBLING_S
    # the seconds from the cache's creation until the stack's pre-scaled ECPU/s minimum is in
    # force, the wait a plan may choose instead of the ramp (cost_model.cache_start): the same
    # page says "within 60 minutes"; AWS names no API field that tells it is in force
    cache_prescale_s: float = PRESCALE_S
    # and one hash slot's ceiling, the same page: about 30,000 ECPU/s (90,000 with READONLY
    # replica reads); planner/model/terms/cache_throughput.py charges the hot key by it
    cache_slot_ecpu_per_s: float = SLOT_ECPU_PER_S
    # Seconds each segment adds outside its workers' iterations, load and checkpoint: the state
    # machine's steps and invocations between segments. 0 (left out of files) unless measured:
    # an adaptive run identifies it from its clock (planner/adapt/online_calibration.py)
    segment_overhead_s: float = 0.0
    # The most one request moves per second whatever the fit says (MB/s; inf: no ceiling). Not
    # a file field: the exchange's view of a store that meters requests per key sets it
    # (ChannelCosts.exchange_platform: a Valkey key's slot, cache_throughput.py)
    request_mb_per_s_max: float = math.inf
    # where the transfer and cold_start coefficients come from (planner/model/inputs/provenance.py);
    # {} = not recorded, counted as provisional
    provenance: Mapping[str, Provenance] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        require_pattern("name", self.name, IDENTIFIER,
                        "an identifier of 1-64 letters, digits, '_.-'", bad)
        require_choice("channel", self.channel, CHANNELS, bad)
        require_choice("arch", self.arch, ARCHITECTURES, bad)
        require_pattern("source", self.source, None, "a string", bad)
        memories = series("memory_mb", self.memory_mb, positive=True)
        if any(high <= low for low, high in itertools.pairwise(memories)):
            raise bad("memory_mb", f"must be strictly ascending, got {list(memories)}")
        set_field(self, "memory_mb", memories)
        for name in ("up_peak", "up_rate", "down_peak", "down_rate"):
            values = series(name, getattr(self, name), positive=True)
            if len(values) != len(memories):
                raise bad(name, f"must have one value per memory ({len(memories)}), "
                                 f"got {len(values)}")
            set_field(self, name, values)
        set_field(self, "invocation_overhead_s",
             number("invocation_overhead_s", self.invocation_overhead_s, low=0.0))
        set_field(self, "torch_load_cpu_s",
             number("torch_load_cpu_s", self.torch_load_cpu_s, low=0.0))
        if isinstance(self.duplex, (list, tuple)) and not self.duplex:
            set_field(self, "duplex", ())  # not profiled: full duplex
        else:
            duplex = series("duplex", self.duplex, positive=False)
            if len(duplex) != len(memories) or not all(d <= 1.0 for d in duplex):
                raise bad("duplex", f"must have one value in [0, 1] per memory "
                                    f"({len(memories)}), got {list(duplex)}")
            set_field(self, "duplex", duplex)
        for name in CPU_FIELDS:
            set_field(self, name, number(name, getattr(self, name), low=0.0))
        for name in ("cache_fresh_ecpu_per_s", "cache_slot_ecpu_per_s"):
            set_field(self, name, number(name, getattr(self, name), low=1.0,
                                         high=MAX_ECPU_PER_SECOND))
        set_field(self, "cache_ramp_doubling_s", number(
            "cache_ramp_doubling_s", self.cache_ramp_doubling_s, low=0.0, above=True,
            high=86_400.0))
        # the trigger's retrier waits this long at most (fasdl/contract/cache.py)
        set_field(self, "cache_prescale_s", number(
            "cache_prescale_s", self.cache_prescale_s, low=0.0, above=True,
            high=float(MAX_CACHE_WAIT_S)))
        set_field(self, "segment_overhead_s", number(
            "segment_overhead_s", self.segment_overhead_s, low=0.0, high=MAX_SEGMENT_OVERHEAD_S))
        if not (isinstance(self.request_mb_per_s_max, (int, float))
                and self.request_mb_per_s_max > 0):
            raise bad("request_mb_per_s_max", f"must be > 0, got {self.request_mb_per_s_max!r}")
        set_field(self, "provenance", parse_provenance(self.provenance, PLATFORM_GROUPS))

    def cold_start_s(self, memory_mb: ArrayLike) -> NDArray[np.float64]:
        """Overhead + torch load: a run is charged one (its later segments start warm)."""
        return np.asarray(self.invocation_overhead_s + self.torch_load_s(memory_mb))

    def torch_load_s(self, memory_mb: ArrayLike) -> NDArray[np.float64]:
        """Unpack + import at memory M: torch_load_cpu_s / min(vCPUs(M), TORCH_LOAD_THREADS)."""
        usable = np.minimum(lambda_vcpus(memory_mb), TORCH_LOAD_THREADS)
        return np.asarray(self.torch_load_cpu_s / usable, dtype=np.float64)

    def coefficients(self, direction: Direction,
                     memory_mb: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """p(M), t(M): linear between profiled memories, the edge values outside them."""
        if direction == "up":
            peaks, rates = self.up_peak, self.up_rate
        elif direction == "down":
            peaks, rates = self.down_peak, self.down_rate
        else:
            raise ProfileError(f"direction must be one of {', '.join(DIRECTIONS)}, "
                               f"got {direction!r}", "direction")
        memory = np.asarray(memory_mb, dtype=float)
        return (np.asarray(np.interp(memory, self.memory_mb, peaks), dtype=np.float64),
                np.asarray(np.interp(memory, self.memory_mb, rates), dtype=np.float64))

    def duplex_at(self, memory_mb: ArrayLike) -> NDArray[np.float64]:
        """d at memory M: linear between profiled memories, 1 (full duplex) if not profiled."""
        memory = np.asarray(memory_mb, dtype=float)
        if not self.duplex:
            return np.ones_like(memory)
        return np.asarray(np.interp(memory, self.memory_mb, self.duplex), dtype=np.float64)

    def throughput(self, direction: Direction, memory_mb: ArrayLike,
                   size_mb: ArrayLike) -> NDArray[np.float64]:
        """MB/s for one object of ``size_mb`` at memory M, at most
        ``request_mb_per_s_max``; broadcasts over both arrays."""
        peak, rate = self.coefficients(direction, memory_mb)
        size = sizes(size_mb)
        return np.asarray(np.minimum(peak * -np.expm1(-rate * size), self.request_mb_per_s_max),
                          dtype=np.float64)

    def transfer_time(self, direction: Direction, memory_mb: ArrayLike,
                      size_mb: ArrayLike) -> NDArray[np.float64]:
        """Seconds for one object, S/tp(S). An empty object still costs the round trip
        1/(p·t), the model's limit as S → 0, so the result is never 0/0."""
        peak, rate = self.coefficients(direction, memory_mb)
        size = sizes(size_mb)
        with np.errstate(divide="ignore", invalid="ignore"):
            # Below ~1e-9 MB use the Taylor limit 1/t + S/2: expm1 would underflow to 0.
            exponent = rate * size
            per_peak = np.where(exponent > 1e-9, size / -np.expm1(-exponent),
                                1.0 / rate + size / 2.0)
        return np.asarray(np.maximum(per_peak / peak, size / self.request_mb_per_s_max),
                          dtype=np.float64)

    @property
    def cpu_profiled(self) -> bool:
        """Whether the profiler measured the exchange's CPU (else every CPU_FIELDS is 0)."""
        return any(getattr(self, name) for name in CPU_FIELDS)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["provenance"] = provenance_dict(self.provenance)
        if not self.provenance:
            del data["provenance"]  # not recorded: the file stays as it was
        if not self.duplex:
            del data["duplex"]  # not profiled: the files stay as they were
        if not self.cpu_profiled:
            for name in CPU_FIELDS:
                del data[name]
        del data["request_mb_per_s_max"]  # the exchange's view, never a file's
        if not self.segment_overhead_s:
            del data["segment_overhead_s"]  # not measured: the files stay as they were
        for name, default in CACHE_DEFAULTS.items():
            if data[name] == default:
                del data[name]  # AWS's documented figures: the files stay as they were
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in data.items()}

    @classmethod
    def from_dict(cls, data: object) -> PlatformProfile:
        if isinstance(data, Mapping) and "request_mb_per_s_max" in data:
            raise bad("request_mb_per_s_max", "is not a profile field: the planner derives it "
                                              "from cache_slot_ecpu_per_s on Valkey")
        return construct(cls, data)


def lambda_vcpus(memory_mb: ArrayLike) -> NDArray[np.float64]:
    """vCPUs Lambda gives memory M: M/1769, at most 6."""
    vcpus = np.asarray(memory_mb, dtype=np.float64) / LAMBDA_MB_PER_VCPU
    return np.asarray(np.minimum(vcpus, LAMBDA_MAX_VCPUS), dtype=np.float64)


