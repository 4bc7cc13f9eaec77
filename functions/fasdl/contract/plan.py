"""The plan contract: what the planner writes, infra deploys and the trigger runs.

A plan has three parts. ``workload`` says what is trained, ``deployment`` what the stack
provisions (read at synth time: M, W, channel, arch, timeout) and ``training`` how a run
proceeds (read by the trigger: K, B^a, B^n, epochs, segment length). Optional sections:
``prediction`` (fasdl.contract.prediction: its typed figures size the cache and feed the budget
guard; its ``breakdown`` is informational), ``limits`` the deadline and budget the trigger
holds a run to (fasdl.contract.limits), ``quotas`` the account quotas the plan was made for
(fasdl.contract.lambda_quotas) and ``run`` the run and execution a frozen copy belongs to
(fasdl.contract.run_owner). ``provenance`` is informational: nothing reads its keys for
control. Every invalid plan raises :class:`PlanError`, whose message names the field and the
allowed range. Pure Python on purpose: this module is imported inside Lambda, by the planner
and by the CDK app.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from fasdl.contract.fields import DATASET_KEY as DATASET_KEY
from fasdl.contract.fields import IDENTIFIER as IDENTIFIER
from fasdl.contract.fields import REGION as REGION
from fasdl.contract.fields import PlanError as PlanError
from fasdl.contract.fields import (
    is_int,
    require_choice,
    require_int,
    require_region,
    require_text_map,
)
from fasdl.contract.json_input import (
    JsonInputError,
    load_json_bytes,
    read_json_file,
    unknown_field_message,
)
from fasdl.contract.lambda_quotas import MAX_MEMORY_MB as MAX_MEMORY_MB
from fasdl.contract.lambda_quotas import MIN_MEMORY_MB as MIN_MEMORY_MB
from fasdl.contract.lambda_quotas import MOVED_PROVENANCE_KEYS, PlanQuotas
from fasdl.contract.limits import Limits
from fasdl.contract.prediction import JSON_FIELDS as PREDICTION_FIELDS
from fasdl.contract.prediction import Prediction as Prediction
from fasdl.contract.run_owner import RunOwner
from fasdl.contract.training import EXCHANGE_DTYPES as EXCHANGE_DTYPES
from fasdl.contract.training import EXCHANGE_STATE_MODELS as EXCHANGE_STATE_MODELS
from fasdl.contract.training import HAP_MERGES as HAP_MERGES
from fasdl.contract.training import LR_SCHEDULES as LR_SCHEDULES
from fasdl.contract.training import MAX_EPOCHS as MAX_EPOCHS
from fasdl.contract.training import MAX_EXCHANGE_CHUNKS as MAX_EXCHANGE_CHUNKS
from fasdl.contract.training import OPTIMIZER_STATE as OPTIMIZER_STATE
from fasdl.contract.training import OPTIMIZERS as OPTIMIZERS
from fasdl.contract.training import SYNC_MODES as SYNC_MODES
from fasdl.contract.training import UPLOAD_BYTES_PER_VALUE as UPLOAD_BYTES_PER_VALUE
from fasdl.contract.training import Training as Training
from fasdl.contract.training import global_batch, partition_sizes
from fasdl.contract.workload import NEEDS_NORMALIZATION
from fasdl.contract.workload import Workload as Workload  # the plan's section, re-exported

PLAN_VERSION = 1

CHANNELS: tuple[str, ...] = ("s3", "valkey")
ARCHITECTURES: tuple[str, ...] = ("x86_64", "arm64")

MAX_TIMEOUT_S = 900
MAX_WORKERS = 1000  # default regional Lambda concurrency

Channel = Literal["s3", "valkey"]
Arch = Literal["x86_64", "arm64"]
Sync = Literal["hap", "bsp"]

# Plan files are a few KB; these limits only stop hostile or broken input early.
PLAN_MAX_BYTES = 64 * 1024
PLAN_MAX_DEPTH = 8  # root -> section -> prediction.breakdown is 3
# The trigger receives the plan as compact JSON in its environment, and Lambda allows 4 KB
# for all of a function's environment variables together (Lambda quotas: "Function
# environment variables"); the other variables take under 1 KB (names, bucket and function
# names), so the plan gets 3 KiB.
PLAN_MAX_COMPACT_BYTES = 3072
PROVENANCE_MAX_CHARS = 512

_Section = TypeVar("_Section", "Workload", "Deployment", "Training", "Prediction", "Limits",
                   "PlanQuotas", "RunOwner")


@dataclass(frozen=True)
class Deployment:
    """What the stack provisions: function memory M, workers W, channel, CPU architecture."""

    channel: str
    arch: str
    memory_mb: int
    workers: int
    region: str = "us-east-1"
    timeout_s: int = MAX_TIMEOUT_S
    # the most workers an adaptive run may scale to (training.adaptive): the stack's
    # concurrency, Map and cache are sized for it; None: W (written only when set)
    workers_max: int | None = None

    def validate(self) -> None:
        require_choice("deployment.channel", self.channel, CHANNELS)
        require_choice("deployment.arch", self.arch, ARCHITECTURES)
        require_int("deployment.memory_mb", self.memory_mb, MIN_MEMORY_MB, MAX_MEMORY_MB)
        require_int("deployment.workers", self.workers, 1, MAX_WORKERS)
        require_region("deployment.region", self.region)
        require_int("deployment.timeout_s", self.timeout_s, 60, MAX_TIMEOUT_S)
        if self.workers_max is not None:
            require_int("deployment.workers_max", self.workers_max, self.workers, MAX_WORKERS)

    @property
    def ceiling(self) -> int:
        """The most workers the stack serves: ``workers_max``, or W."""
        return self.workers if self.workers_max is None else self.workers_max

    @property
    def workers_label(self) -> str:
        """W, or W-ceiling when the stack serves more (the fingerprint's W part)."""
        return (str(self.workers) if self.workers_max is None
                else f"{self.workers}-{self.workers_max}")

    def fingerprint(self) -> str:
        """What a deployed stack is built for; a run's plan must match it."""
        return (f"{self.channel}:{self.arch}:{self.memory_mb}MB:W{self.workers_label}:"
                f"{self.region}:{self.timeout_s}s")


@dataclass(frozen=True)
class Plan:
    workload: Workload
    deployment: Deployment
    training: Training
    prediction: Prediction | None = None
    limits: Limits | None = None  # deadline and budget the run keeps (fasdl.contract.limits)
    quotas: PlanQuotas | None = None  # None: made for Lambda's default quotas
    run: RunOwner | None = None  # only in the copy the trigger freezes at a run's start
    provenance: dict[str, str] = field(default_factory=dict)  # informational
    version: int = PLAN_VERSION

    def __post_init__(self) -> None:
        self.validate()

    def on_channel(self, channel: str) -> Plan:
        """This plan on ``channel``. Its prediction was made for the planned channel and does
        not hold on another, so it is dropped: the stack then sizes a cache from its network
        estimate (infra/cache_limits.py) and the guards go by measurements alone."""
        if channel == self.deployment.channel:
            return self
        return dataclasses.replace(self, prediction=None, deployment=dataclasses.replace(
            self.deployment, channel=channel))

    # ---- validation -----------------------------------------------------------------------
    def validate(self) -> None:
        if self.version != PLAN_VERSION:
            raise PlanError("version", f"must be {PLAN_VERSION}, got {self.version!r}")
        self.workload.validate()
        self.deployment.validate()
        self.training.validate(self.deployment.workers)
        if self.deployment.channel != "s3" and self.training.exchange_key_prefixes != 1:
            raise PlanError("training.exchange_key_prefixes",
                            f"must be 1 on the {self.deployment.channel} channel (only S3 "
                            f"partitions by key prefix), got {self.training.exchange_key_prefixes}")
        if self.prediction is not None:
            self.prediction.validate()
            if self.deployment.channel == "valkey" and not self.prediction.has_cache_ecpu:
                raise PlanError("prediction.breakdown.cache_ecpu_per_s_peak",
                                "is missing: a Valkey plan's prediction sizes the cache's "
                                "ECPU/s limits (plan again with python -m planner plan, or "
                                "drop the prediction for the network estimate)")
        for section in (self.limits, self.quotas, self.run):
            if section is not None:
                section.validate()
        require_text_map("provenance", self.provenance, max_chars=PROVENANCE_MAX_CHARS)
        if self.quotas is None:
            _refuse_moved_quotas(self.provenance)
        if (self.training.augmentation in NEEDS_NORMALIZATION
                and self.workload.normalization is None):
            raise PlanError("workload.normalization",
                            f"is required by training.augmentation "
                            f"'{self.training.augmentation}' (the dataset's meta.json has it; "
                            f"python -m planner workload new copies it)")
        if self.global_batch > self.workload.samples:
            raise PlanError(
                "workload.samples",
                f"must be >= the global batch {self.global_batch} so an epoch has at least one "
                f"iteration, got {self.workload.samples}",
            )

    def check_environment_size(self) -> None:
        """A plan to deploy must fit the trigger's environment (PLAN_MAX_COMPACT_BYTES); the
        synth and the planner check it, not every Plan: the trigger adds run ids to the
        run section to the copy it stores. Blames the largest free-form entry, the only part
        whose size no other check bounds."""
        size = len(self.to_compact_json().encode())
        if size <= PLAN_MAX_COMPACT_BYTES:
            return
        breakdown = self.prediction.breakdown if self.prediction is not None else {}
        entries: list[tuple[str, dict[str, object]]] = [
            (f"provenance.{key}", {key: value}) for key, value in self.provenance.items()]
        entries += [(f"prediction.breakdown.{key}", {key: value})
                    for key, value in breakdown.items()]
        sized = [(len(json.dumps(entry).encode()), path) for path, entry in entries]
        used, path = max(sized, default=(size, "<root>"))
        raise PlanError(path, f"takes {used} bytes of the plan's {size} as compact JSON; at "
                              f"most {PLAN_MAX_COMPACT_BYTES} fit in the trigger's environment "
                              "(Lambda allows 4 KB for all variables): shorten it")

    # ---- derived quantities ----------------------------------------------------------------
    @property
    def global_batch(self) -> int:
        t = self.training
        return global_batch(self.deployment.workers, t.aggregators, t.batch_aggregator,
                            t.batch_non_aggregator)

    @property
    def iterations_per_epoch(self) -> int:
        """Iterations every worker runs per epoch: floor(D / B^g), the rest is dropped."""
        return self.workload.samples // self.global_batch

    @property
    def total_iterations(self) -> int:
        return self.iterations_per_epoch * self.training.epochs

    @property
    def segments(self) -> int:
        """Number of segments (invocation rounds) the run takes."""
        return -(-self.total_iterations // self.training.segment_iterations)

    @property
    def pattern(self) -> str:
        t = self.training
        if t.aggregators == self.deployment.workers:
            return "scatterreduce"
        if t.aggregators == 1 and t.sync == "bsp":
            return "allreduce"
        return "kreduce"

    def partition_sizes(self) -> list[int]:
        t = self.training
        return partition_sizes(self.workload.samples, self.deployment.workers, t.aggregators,
                               t.batch_aggregator, t.batch_non_aggregator)

    def batch_of(self, worker: int) -> int:
        require_int("worker", worker, 0, self.deployment.workers - 1)
        t = self.training
        return t.batch_aggregator if worker < t.aggregators else t.batch_non_aggregator

    def deployment_fingerprint(self) -> str:
        """What a deployed stack is built for (Deployment.fingerprint)."""
        return self.deployment.fingerprint()

    # ---- JSON ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("prediction", "limits", "quotas", "run"):  # absent sections stay absent
            if getattr(self, name) is None:
                data.pop(name)
        data["workload"] = self.workload.to_dict()
        if self.deployment.workers_max is None:
            data["deployment"].pop("workers_max")
        if self.prediction is not None:
            data["prediction"] = self.prediction.to_dict()
        if self.quotas is not None:
            data["quotas"] = self.quotas.to_dict()
        defaults = Training.__dataclass_fields__
        data["training"] = {name: value for name, value in data["training"].items()
                            if name not in Training.OMITTED_AT_DEFAULT
                            or value != defaults[name].default}
        return {"version": data.pop("version"), **data}

    def to_compact_json(self) -> str:
        """The form the trigger's environment carries (FASDL_PLAN)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def from_dict(cls, data: object) -> Plan:
        if not isinstance(data, dict):
            raise PlanError("<root>", f"must be a JSON object, got {type(data).__name__}")
        # the planner's confidence section (planner/model/confidence.py) is for the reader:
        # accepted and dropped, nothing at run time needs it
        data = {key: value for key, value in data.items() if key != "confidence"}
        _reject_unknown("<root>", data, {f.name for f in fields(cls)})
        if "version" not in data:
            raise PlanError("version", f"is missing; this reader expects version {PLAN_VERSION}")
        version = data["version"]
        if not is_int(version) or version != PLAN_VERSION:
            raise PlanError("version", f"must be {PLAN_VERSION}, got {version!r}")
        provenance = require_text_map("provenance", data.get("provenance", {}),
                                      max_chars=PROVENANCE_MAX_CHARS)
        return cls(
            workload=_build(Workload, "workload", _section(data, "workload")),
            deployment=_build(Deployment, "deployment", _section(data, "deployment")),
            training=_build(Training, "training", _section(data, "training")),
            prediction=_prediction(data),
            limits=_optional(Limits, "limits", data),
            quotas=_optional(PlanQuotas, "quotas", data),
            run=_optional(RunOwner, "run", data),
            provenance=provenance,
            version=version,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        try:
            data = load_json_bytes(text, what="plan JSON", max_bytes=PLAN_MAX_BYTES,
                                   max_depth=PLAN_MAX_DEPTH)
        except JsonInputError as error:
            raise PlanError("<root>", str(error)) from error
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        try:
            data = read_json_file(path, what="plan file", max_bytes=PLAN_MAX_BYTES,
                                  max_depth=PLAN_MAX_DEPTH)
        except JsonInputError as error:
            raise PlanError("<file>", str(error)) from error
        return cls.from_dict(data)


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    if name not in data:
        raise PlanError(name, "is missing")
    value = data[name]
    if not isinstance(value, dict):
        raise PlanError(name, f"must be a JSON object, got {type(value).__name__}")
    return value


def _reject_unknown(path: str, data: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        where = "" if path == "<root>" else f"{path}."
        name = unknown[0] or '""'  # an empty key still gets a visible name
        raise PlanError(f"{where}{name}", unknown_field_message(unknown[0], known))


def _refuse_moved_quotas(provenance: dict[str, str]) -> None:
    """Plans written before the ``quotas`` section kept the quotas in provenance; read as
    informational now, they would silently become Lambda's defaults, so they are refused."""
    moved = [key for key in MOVED_PROVENANCE_KEYS if key in provenance]
    if moved:
        raise PlanError(f"provenance.{moved[0]}",
                        f"is where plans written before issue 40 kept the account quotas; they "
                        f"are read from quotas.{moved[0]} now: plan again with python -m planner "
                        f"plan (or move provenance.{', '.join(moved)} into a 'quotas' section "
                        "as numbers, docs/reference.md)")


def _optional(kind: type[_Section], path: str, data: dict[str, Any]) -> _Section | None:
    """An optional section: absent or null is None."""
    return None if data.get(path) is None else _build(kind, path, data[path])


def _prediction(data: dict[str, Any]) -> Prediction | None:
    """Its typed figures live inside ``breakdown`` (fasdl.contract.prediction)."""
    if data.get("prediction") is None:
        return None
    return _build(Prediction, "prediction", data["prediction"], known=set(PREDICTION_FIELDS),
                  build=Prediction.from_dict)


def _build(kind: type[_Section], path: str, data: object, *, known: set[str] | None = None,
           build: Callable[[dict[str, Any]], _Section] | None = None) -> _Section:
    if not isinstance(data, dict):
        raise PlanError(path, f"must be a JSON object, got {type(data).__name__}")
    _reject_unknown(path, data, known if known is not None else {f.name for f in fields(kind)})
    try:
        return build(data) if build is not None else kind(**data)
    except TypeError as error:
        missing = re.findall(r"'(\w+)'", str(error))
        name = missing[0] if missing else "?"
        raise PlanError(f"{path}.{name}", f"is missing ({error})") from error
