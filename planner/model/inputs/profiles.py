"""The planner's inputs: what is trained, how fast the platform moves bytes, what AWS charges.

* :class:`WorkloadProfile` — a model + dataset with the FasDL compute model
  T_train_iter = a·(B+b)/(M+m) (FasDL Eq. 4) and the memory model M_B = k·B + c (thesis Eq. 4-1).
* :class:`PlatformProfile` (planner/model/inputs/platform_profile.py, re-exported here) — per-memory
  throughput coefficients of tp = p(M)·(1 − e^(−t(M)·S)) (FasDL Eq. 2) for upload and download
  over one channel, plus what a cold start costs: a fixed per-invocation overhead and the torch
  load, CPU-seconds spread over the vCPUs of memory M.
* :class:`Prices` — list prices of one region.

Both profiles carry a ``provenance`` per coefficient group (planner/model/inputs/provenance.py).
Shipped profiles live as JSON under ``planner/data`` and load by name; user profiles load from a
path. Every invalid field raises :class:`ProfileError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fasdl.contract.fields import require_choice, require_pattern
from fasdl.contract.plan import ARCHITECTURES, CHANNELS, REGION, PlanError, Workload
from fasdl.contract.workload import USER_FIELDS
from planner.model.inputs.compute import predict_train_time
from planner.model.inputs.platform_profile import (
    CPU_FIELDS,
    DIRECTIONS,
    LAMBDA_MAX_VCPUS,
    LAMBDA_MB_PER_VCPU,
    TORCH_LOAD_THREADS,
    Direction,
    PlatformProfile,
    lambda_vcpus,
    sizes,
)
from planner.model.inputs.profile_fields import (
    ProfileError,
    bad,
    check_names,
    construct,
    number,
    read_profile_json,
    set_field,
)
from planner.model.inputs.provenance import (
    WORKLOAD_GROUPS,
    Provenance,
    parse_provenance,
    provenance_dict,
)
from planner.model.inputs.recipe import Recipe

_DATA: Traversable = resources.files("planner") / "data"


# Lambda's largest function memory: m <= -10240 leaves M + m <= 0, no compute, at every memory.
LAMBDA_MAX_MEMORY_MB = 10240.0

# (field, low, low excluded, high) of WorkloadProfile's numbers (dataset_mb and model_mb are
# its workload's). b > -1 keeps a·(B+b) > 0 for every batch B >= 1; m may be below -M for small
# M (a fit of a tiny model whose time is flat in M: the searches mark M + m <= 0 infeasible) but
# not at every memory Lambda has (the fit's own floor is -0.999 x its smallest profiled memory);
# k >= 1e-9 MB, the fit's own bound, keeps B_M = (M - c)/k <= 1e13 in int64.
# The upper bounds are far beyond any real workload and keep every product finite.
_WORKLOAD_NUMBERS: tuple[tuple[str, float, bool, float], ...] = (
    ("dataset_mb", 0.0, True, 1e7), ("model_mb", 0.0, True, 1e5), ("a", 0.0, True, 1e6),
    ("b", -1.0, True, 1e6), ("m", -LAMBDA_MAX_MEMORY_MB, True, 1e6), ("k", 1e-9, False, 1e5),
    ("c", 0.0, False, 1e6), ("cpu_step_s", 0.0, False, 1e6), ("cpu_sample_s", 0.0, False, 1e6))
_SIZES = ("dataset_mb", "model_mb")  # the workload's numbers among them
# Why a bound is what it is, where the range alone does not say.
_WORKLOAD_REASONS = {
    "m": f"T = a·(B+b)/(M+m) needs M + m > 0 at some memory M <= {LAMBDA_MAX_MEMORY_MB:.0f} MB",
    "b": "a·(B+b) must be > 0 for every batch B >= 1",
}


@dataclass(frozen=True)
class WorkloadProfile:
    """A model + dataset: ``workload``, the plan's own section (name, model, dataset, sizes and
    the user's fields, checked by the plan's rules), its compute model (a, b, m), memory model
    (k, c) and how to train it (planner.model.inputs.recipe; its optimizer adds to c). Its file is
    flat: the workload's fields beside the profile's own (from_dict, to_dict)."""

    workload: Workload
    a: float
    b: float
    m: float
    k: float
    c: float
    notes: str = ""
    recipe: Recipe = field(default_factory=Recipe)
    # CPU of one training iteration, cpu_step_s + B·cpu_sample_s CPU-seconds (profiled; 0: not
    # measured, and T_train stands for it): planner/model/terms/client_cpu.py's bound charges it
    cpu_step_s: float = 0.0
    cpu_sample_s: float = 0.0
    # [smallest, largest] M the profiler measured (None: the paper's or a hand-made profile);
    # a plan outside it extrapolates the fit, and says so
    profiled_memory_mb: list[float] | None = None
    # where the compute and memory coefficients come from (planner/model/inputs/provenance.py);
    # {} = not recorded, counted as provisional
    provenance: Mapping[str, Provenance] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.workload, Workload):
            raise ProfileError(f"a WorkloadProfile's workload must be a Workload, got "
                               f"{type(self.workload).__name__}", "workload")
        for name, low, above, high in _WORKLOAD_NUMBERS:
            owner: object = self.workload if name in _SIZES else self
            try:
                value = number(name, getattr(owner, name), low=low, above=above, high=high)
            except ProfileError as error:
                reason = _WORKLOAD_REASONS.get(name)
                if reason is None:
                    raise
                raise bad(name, f"{error.detail} ({reason})") from error
            set_field(owner, name, value)  # as a float (the workload's sizes too)
        require_pattern("notes", self.notes, None, "a string", bad)
        set_field(self, "provenance", parse_provenance(self.provenance, WORKLOAD_GROUPS))
        try:
            set_field(self, "recipe", Recipe.from_value(self.recipe))
        except PlanError as error:  # the recipe's field, as the plan names it
            raise bad(error.field, error.detail) from error
        self.workload.validate(prefix="", fail=bad)  # the plan's rules, the file's names

    # The workload's names and sizes, read on every evaluation (D, S_d, S_m): views of
    # ``workload``, not copies.
    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def model(self) -> str:
        return self.workload.model

    @property
    def dataset(self) -> str:
        return self.workload.dataset

    @property
    def samples(self) -> int:
        return self.workload.samples

    @property
    def dataset_mb(self) -> float:
        return self.workload.dataset_mb

    @property
    def model_mb(self) -> float:
        return self.workload.model_mb

    def with_workload(self, **changes: Any) -> WorkloadProfile:
        """This profile with some of its workload's fields changed (checked again)."""
        return replace(self, workload=replace(self.workload, **changes))

    def train_time(self, batch: ArrayLike, memory_mb: ArrayLike) -> NDArray[np.float64]:
        """Seconds per training iteration (planner/model/inputs/compute.py)."""
        return predict_train_time(batch, memory_mb, a=self.a, b=self.b, m=self.m)

    def train_cpu_time(self, batch: ArrayLike, memory_mb: ArrayLike) -> NDArray[np.float64]:
        """A training iteration's CPU at M's share, (cpu_step_s + B·cpu_sample_s)/vCPUs(M)."""
        cpu = self.cpu_step_s + np.asarray(batch, dtype=float) * self.cpu_sample_s
        return np.asarray(cpu / lambda_vcpus(memory_mb), dtype=np.float64)

    def max_batch(self, memory_mb: ArrayLike) -> NDArray[np.int64]:
        """Largest executable batch B_M = floor((M − c')/k); <= 0 means nothing fits."""
        memory = np.asarray(memory_mb, dtype=float)
        return np.floor((memory - self.base_memory_mb) / self.k).astype(np.int64)

    def min_memory(self, batch: ArrayLike) -> NDArray[np.float64]:
        """Smallest memory that runs batch B, M_B = k·B + c' (thesis Eq. 4-1)."""
        return np.asarray(self.k * np.asarray(batch, dtype=float) + self.base_memory_mb,
                          dtype=np.float64)

    @property
    def base_memory_mb(self) -> float:
        """c' = c plus the optimizer state c does not hold (AdamW's second vector)."""
        return self.c + self.recipe.extra_state_mb(self.model_mb)

    @property
    def cpu_profiled(self) -> bool:
        """Whether the profiler measured a training iteration's CPU (else both are 0)."""
        return bool(self.cpu_step_s or self.cpu_sample_s)

    def to_dict(self) -> dict[str, Any]:
        """The flat file, in the shipped files' order: the workload's fields among the
        profile's own, optional ones only where set."""
        own = asdict(self)
        workload = own.pop("workload")
        data = {name: workload[name] if name in workload else own[name]
                for name in PROFILE_FIELDS}
        data["provenance"] = provenance_dict(self.provenance)  # {}: not recorded, left out
        if not self.cpu_profiled:
            del data["cpu_step_s"], data["cpu_sample_s"]  # not profiled: files stay as they were
        for name, default in _OPTIONAL_WORKLOAD_FIELDS.items():
            if data[name] == default:  # absent, as in the shipped files
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: object) -> WorkloadProfile:
        if isinstance(data, dict) and not any(name in data for name in COMPUTE_FIELDS):
            raise ProfileError(unprofiled_message(str(data.get("name", "?"))))
        given = check_names(cls.__name__, data, PROFILE_FIELDS, _REQUIRED_FIELDS)
        workload = {name: value for name, value in given.items() if name in _WORKLOAD_FIELDS}
        own = {name: value for name, value in given.items() if name not in _WORKLOAD_FIELDS}
        return cls(workload=Workload(**workload), **own)


_WORKLOAD_FIELDS = frozenset(item.name for item in fields(Workload))
# The file's fields, in the order the shipped files have them
PROFILE_FIELDS: tuple[str, ...] = (
    *(name for name in Workload.__dataclass_fields__ if name not in USER_FIELDS),
    *(item.name for item in fields(WorkloadProfile)
      if item.name not in ("workload", "profiled_memory_mb", "provenance")),
    *USER_FIELDS, "profiled_memory_mb", "provenance")
_REQUIRED_FIELDS: tuple[str, ...] = tuple(
    item.name for kind in (Workload, WorkloadProfile) for item in fields(kind)
    if item.name != "workload" and item.default is MISSING and item.default_factory is MISSING)
_OPTIONAL_WORKLOAD_FIELDS: dict[str, object] = {
    **{name: Workload.__dataclass_fields__[name].default for name in USER_FIELDS},
    "profiled_memory_mb": None, "provenance": {}}
# The fitted coefficients: a workload without any of them (python -m planner workload new
# writes one) must be profiled before it can be planned.
COMPUTE_FIELDS = ("a", "b", "m", "k", "c")


def unprofiled_message(name: str) -> str:
    return (f"workload {name} is not profiled yet (no compute coefficients a, b, m, k, c): "
            f"profile it on this machine with `python -m local profile --workload "
            f"<its file>`, or on AWS (deploy with `-c workload=<its file> -c profiling=true`, "
            f"run the profiling state machine, then `python -m planner fit --workload <its "
            f"file> --samples ...`: docs/profiling.md), then plan with the profile it writes")


VALKEY_PRICES = ("valkey_gb_hour", "valkey_min_gb", "valkey_ecpu")
# The optional prices each channel needs (S3's are every region's: datasets and checkpoints
# live there whatever the channel); planner/model/terms/channels.py holds the rest of a channel.
CHANNEL_PRICES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"s3": (), "valkey": VALKEY_PRICES})


@dataclass(frozen=True)
class Prices:
    """USD list prices of one region (per request, per GB-second, per GB-hour, per ECPU)."""

    region: str
    lambda_gb_s: Mapping[str, float]
    lambda_request: float
    s3_put: float
    s3_get: float
    s3_storage_gb_month: float  # S3 Standard, first tier: checkpoints and results
    sfn_transition: float
    # ElastiCache Serverless (Valkey); None where no price was confirmed: Valkey plans need one
    valkey_gb_hour: float | None = None
    valkey_min_gb: float | None = None
    valkey_ecpu: float | None = None
    valkey_kb_per_ecpu: float = 1.0
    source: str = ""
    s3_list: float = 0.005 / 1000  # LIST is billed like PUT; polling for objects pays it

    def __post_init__(self) -> None:
        require_pattern("region", self.region, REGION, "an AWS region name such as us-east-1",
                        bad)
        if not isinstance(self.lambda_gb_s, Mapping) or not self.lambda_gb_s:
            raise bad("lambda_gb_s", f"must map architectures ({', '.join(ARCHITECTURES)}) "
                                      f"to USD per GB-second, got {self.lambda_gb_s!r}")
        per_arch = {}
        for arch, price in self.lambda_gb_s.items():
            require_choice(f"lambda_gb_s.{arch}", arch, ARCHITECTURES, bad)
            per_arch[arch] = number(f"lambda_gb_s.{arch}", price, low=0.0)
        set_field(self, "lambda_gb_s", MappingProxyType(per_arch))
        for name in ("lambda_request", "s3_put", "s3_get", "s3_storage_gb_month",
                     "sfn_transition", "s3_list"):
            set_field(self, name, number(name, getattr(self, name), low=0.0))
        for name in VALKEY_PRICES:
            if getattr(self, name) is not None:
                set_field(self, name, number(name, getattr(self, name), low=0.0))
        set_field(self, "valkey_kb_per_ecpu",
             number("valkey_kb_per_ecpu", self.valkey_kb_per_ecpu, low=0.0, above=True))
        require_pattern("source", self.source, None, "a string", bad)

    def require_channel(self, channel: str) -> None:
        """An error naming the first price ``channel`` needs that the table lacks."""
        needed = CHANNEL_PRICES[channel]
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ProfileError(f"the price table of {self.region} has no {channel} price "
                               f"{missing[0]}: plan with --channel s3, or pass --prices FILE "
                               f"with {', '.join(needed)} for {self.region}", missing[0])

    def require_valkey(self) -> tuple[float, float, float]:
        """(GB-hour, metered minimum GB, per ECPU) of ElastiCache Serverless for Valkey, or an
        error naming the first missing price."""
        self.require_channel("valkey")
        gb_hour, min_gb, ecpu = (float(getattr(self, name)) for name in VALKEY_PRICES)
        return gb_hour, min_gb, ecpu

    def lambda_mb_s(self, arch: str) -> float:
        """USD per MB-second of function memory (GB = 1024 MB in Lambda billing)."""
        if arch not in self.lambda_gb_s:
            raise ProfileError(f"no Lambda price for arch {arch!r}; priced architectures: "
                               f"{', '.join(sorted(self.lambda_gb_s))}", "lambda_gb_s")
        return self.lambda_gb_s[arch] / 1024.0

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["lambda_gb_s"] = dict(self.lambda_gb_s)
        return data

    @classmethod
    def from_dict(cls, data: object) -> Prices:
        return construct(cls, data)


# ---- shipped profiles ------------------------------------------------------------------------

def _names(folder: str) -> list[str]:
    return sorted(entry.name.removesuffix(".json") for entry in (_DATA / folder).iterdir()
                  if entry.name.endswith(".json"))


def known_workloads() -> list[str]:
    """Names of the shipped workload profiles."""
    return _names("workloads")


def known_platforms() -> list[str]:
    """Names of the shipped platform profiles (arm64 variants are derived, see load_platform)."""
    return _names("platforms")


def known_regions() -> list[str]:
    """Regions with shipped prices."""
    return _names("prices")


def load_workload(name_or_path: str) -> WorkloadProfile:
    """A shipped workload by name, or a workload JSON file by path."""
    if name_or_path in known_workloads():
        resource: Traversable | Path = _DATA / "workloads" / f"{name_or_path}.json"
    elif Path(name_or_path).is_file():
        resource = Path(name_or_path)
    else:
        raise ProfileError(f"unknown workload {name_or_path!r}: not a shipped name "
                           f"({', '.join(known_workloads())}) nor a JSON file path", "workload")
    return WorkloadProfile.from_dict(read_profile_json(resource, "workload profile"))


def load_platform_file(path: str | Path) -> PlatformProfile:
    """A platform profile JSON (e.g. one profiled in your own account)."""
    return PlatformProfile.from_dict(read_profile_json(Path(path), "platform profile"))


def load_platform(channel: str, arch: str = "x86_64") -> PlatformProfile:
    """The shipped Lambda profile for a channel and CPU architecture.

    Only x86_64 has measurements; arm64 reuses its transfer coefficients (network speed is
    set by the memory size, not by the CPU) and says so in ``source``.
    """
    if channel not in CHANNELS:
        raise ProfileError(f"unknown channel {channel!r}; known channels: {', '.join(CHANNELS)}",
                           "channel")
    if arch not in ARCHITECTURES:
        raise ProfileError(f"unknown arch {arch!r}; known architectures: "
                           f"{', '.join(ARCHITECTURES)}", "arch")
    name = f"aws-lambda-{arch}-{channel}"
    if name in known_platforms():
        return PlatformProfile.from_dict(
            read_profile_json(_DATA / "platforms" / f"{name}.json", "platform profile"))
    measured = load_platform(channel, "x86_64")
    return replace(measured, name=name, arch=arch, source=(
        f"{measured.source} | {arch}: no {arch} transfer measurements exist; reuses the x86_64 "
        f"profile {measured.name!r} unchanged until {arch} is profiled."))


def load_prices(region: str = "us-east-1") -> Prices:
    """Shipped list prices for a region."""
    if region not in known_regions():
        raise ProfileError(f"no prices for region {region!r}; known regions: "
                           f"{', '.join(known_regions())}", "region")
    return Prices.from_dict(read_profile_json(_DATA / "prices" / f"{region}.json", "prices"))


__all__ = [
    "CPU_FIELDS", "DIRECTIONS", "LAMBDA_MAX_VCPUS", "LAMBDA_MB_PER_VCPU", "TORCH_LOAD_THREADS",
    "Direction", "PlatformProfile", "Prices", "ProfileError", "WorkloadProfile",
    "known_platforms", "known_regions", "known_workloads", "lambda_vcpus", "load_platform",
    "load_platform_file", "load_prices", "load_workload", "sizes",
]
