"""The plan contract: what the planner writes, infra deploys and the trigger runs.

A plan has three parts. ``workload`` says what is trained, ``deployment`` what the stack
provisions (read at synth time: M, W, channel, arch, timeout) and ``training`` how a run
proceeds (read by the trigger: K, B^a, B^n, epochs, segment length). ``prediction`` and
``provenance`` are informational. Every invalid plan raises :class:`PlanError`, whose message
names the field and the allowed range. Pure Python on purpose: this module is imported inside
Lambda, by the planner and by the CDK app.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

PLAN_VERSION = 1

CHANNELS: tuple[str, ...] = ("s3", "valkey")
ARCHITECTURES: tuple[str, ...] = ("x86_64", "arm64")
SYNC_MODES: tuple[str, ...] = ("hap", "bsp")

MIN_MEMORY_MB = 128
MAX_MEMORY_MB = 10240
MAX_TIMEOUT_S = 900
MAX_WORKERS = 1000  # default regional Lambda concurrency
MAX_EPOCHS = 100_000

Channel = Literal["s3", "valkey"]
Arch = Literal["x86_64", "arm64"]
Sync = Literal["hap", "bsp"]

# Shared with the planner's profiles so a profile can never hold a name a plan rejects.
IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
DATASET_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,255}$")
REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")


_Section = TypeVar("_Section", "Workload", "Deployment", "Training", "Prediction")


class PlanError(ValueError):
    """An invalid plan. ``field`` is the dotted path of the offending field."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"plan field '{field_path}': {message}")
        self.field = field_path


def _require_int(path: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise PlanError(path, f"must be an integer {bound}, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise PlanError(path, f"must be in {bound}, got {value}")
    return value


def _require_float(path: str, value: object, low: float, high: float, *, open_low: bool = False,
                   open_high: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(path, f"must be a number, got {value!r}")
    number = float(value)
    below = number <= low if open_low else number < low
    above = number >= high if open_high else number > high
    if below or above or number != number:  # NaN fails every comparison
        left = "(" if open_low else "["
        right = ")" if open_high else "]"
        raise PlanError(path, f"must be in {left}{low}, {high}{right}, got {value}")
    return number


def _require_choice(path: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise PlanError(path, f"must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _require_pattern(path: str, value: object, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise PlanError(path, f"must be {what}, got {value!r}")
    return value


@dataclass(frozen=True)
class Workload:
    """What is trained. ``samples`` is D, ``dataset_mb`` S_d, ``model_mb`` S_m."""

    name: str
    model: str
    dataset: str
    samples: int
    dataset_mb: float
    model_mb: float

    def validate(self) -> None:
        _require_pattern("workload.name", self.name, IDENTIFIER,
                         "an identifier of 1-64 letters, digits, '_', '.', '-'")
        _require_pattern("workload.model", self.model, IDENTIFIER,
                         "a model registry name of 1-64 letters, digits, '_', '.', '-'")
        _require_pattern("workload.dataset", self.dataset, DATASET_KEY,
                         "an S3 key prefix of 1-256 letters, digits, '_', '.', '-', '/'")
        _require_int("workload.samples", self.samples, 1, 10**10)
        _require_float("workload.dataset_mb", self.dataset_mb, 0.0, 1e7, open_low=True)
        _require_float("workload.model_mb", self.model_mb, 0.0, 1e5, open_low=True)


@dataclass(frozen=True)
class Deployment:
    """What the stack provisions: function memory M, workers W, channel, CPU architecture."""

    channel: str
    arch: str
    memory_mb: int
    workers: int
    region: str = "us-east-1"
    timeout_s: int = MAX_TIMEOUT_S

    def validate(self) -> None:
        _require_choice("deployment.channel", self.channel, CHANNELS)
        _require_choice("deployment.arch", self.arch, ARCHITECTURES)
        _require_int("deployment.memory_mb", self.memory_mb, MIN_MEMORY_MB, MAX_MEMORY_MB)
        _require_int("deployment.workers", self.workers, 1, MAX_WORKERS)
        _require_pattern("deployment.region", self.region, REGION,
                         "an AWS region name such as us-east-1")
        _require_int("deployment.timeout_s", self.timeout_s, 60, MAX_TIMEOUT_S)


@dataclass(frozen=True)
class Training:
    """How a run proceeds: aggregators K, batch sizes B^a/B^n, epochs E, segment length."""

    aggregators: int
    batch_aggregator: int
    batch_non_aggregator: int
    max_global_batch: int
    epochs: int
    segment_iterations: int
    sync: str = "hap"
    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    seed: int = 0

    def validate(self, workers: int) -> None:
        _require_int("training.aggregators", self.aggregators, 1, workers)
        _require_int("training.batch_aggregator", self.batch_aggregator, 1, 1_000_000)
        _require_int("training.batch_non_aggregator", self.batch_non_aggregator, 1, 1_000_000)
        _require_int("training.max_global_batch", self.max_global_batch, 1, 100_000_000)
        _require_int("training.epochs", self.epochs, 1, MAX_EPOCHS)
        _require_int("training.segment_iterations", self.segment_iterations, 1, 10**9)
        _require_choice("training.sync", self.sync, SYNC_MODES)
        _require_float("training.learning_rate", self.learning_rate, 0.0, 10.0, open_low=True)
        _require_float("training.momentum", self.momentum, 0.0, 1.0, open_high=True)
        _require_float("training.weight_decay", self.weight_decay, 0.0, 1.0)
        _require_int("training.seed", self.seed, 0, 2**32 - 1)
        if self.aggregators < workers and self.batch_non_aggregator < self.batch_aggregator:
            raise PlanError(
                "training.batch_non_aggregator",
                f"must be >= batch_aggregator={self.batch_aggregator} when aggregators < workers "
                f"(non-aggregators do not aggregate, so they train the larger batch), "
                f"got {self.batch_non_aggregator}",
            )
        if self.aggregators == workers and self.batch_non_aggregator != self.batch_aggregator:
            raise PlanError(
                "training.batch_non_aggregator",
                f"must equal batch_aggregator={self.batch_aggregator} when aggregators == workers "
                f"(there are no non-aggregators), got {self.batch_non_aggregator}",
            )
        batch = global_batch(workers, self.aggregators, self.batch_aggregator,
                             self.batch_non_aggregator)
        if batch > self.max_global_batch:
            raise PlanError(
                "training.max_global_batch",
                f"global batch K*B^a + (W-K)*B^n = {batch} exceeds the cap "
                f"{self.max_global_batch}; allowed range is [1, {self.max_global_batch}]",
            )


@dataclass(frozen=True)
class Prediction:
    """The planner's prediction for this plan (informational, never trusted for control)."""

    time_s: float
    cost_usd: float
    breakdown: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    workload: Workload
    deployment: Deployment
    training: Training
    prediction: Prediction | None = None
    provenance: dict[str, str] = field(default_factory=dict)
    version: int = PLAN_VERSION

    def __post_init__(self) -> None:
        self.validate()

    # ---- validation -----------------------------------------------------------------------
    def validate(self) -> None:
        if self.version != PLAN_VERSION:
            raise PlanError("version", f"must be {PLAN_VERSION}, got {self.version!r}")
        self.workload.validate()
        self.deployment.validate()
        self.training.validate(self.deployment.workers)
        if self.global_batch > self.workload.samples:
            raise PlanError(
                "workload.samples",
                f"must be >= the global batch {self.global_batch} so an epoch has at least one "
                f"iteration, got {self.workload.samples}",
            )

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
        _require_int("worker", worker, 0, self.deployment.workers - 1)
        t = self.training
        return t.batch_aggregator if worker < t.aggregators else t.batch_non_aggregator

    def deployment_fingerprint(self) -> str:
        """What a deployed stack is built for; a run's plan must match it."""
        d = self.deployment
        return f"{d.channel}:{d.arch}:{d.memory_mb}MB:W{d.workers}:{d.region}:{d.timeout_s}s"

    # ---- JSON ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.prediction is None:
            data.pop("prediction")
        return {"version": data.pop("version"), **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def from_dict(cls, data: object) -> Plan:
        if not isinstance(data, dict):
            raise PlanError("<root>", f"must be a JSON object, got {type(data).__name__}")
        _reject_unknown("<root>", data, {f.name for f in fields(cls)})
        if "version" not in data:
            raise PlanError("version", f"is missing; this reader expects version {PLAN_VERSION}")
        version = data["version"]
        if version != PLAN_VERSION:
            raise PlanError("version", f"must be {PLAN_VERSION}, got {version!r}")
        prediction_data = data.get("prediction")
        prediction = (None if prediction_data is None
                      else _build(Prediction, "prediction", prediction_data))
        provenance = data.get("provenance", {})
        if not isinstance(provenance, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in provenance.items()):
            raise PlanError("provenance", "must be an object of string values")
        return cls(
            workload=_build(Workload, "workload", _section(data, "workload")),
            deployment=_build(Deployment, "deployment", _section(data, "deployment")),
            training=_build(Training, "training", _section(data, "training")),
            prediction=prediction,
            provenance=dict(provenance),
            version=version,
        )

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise PlanError("<root>", f"is not valid JSON: {error}") from error
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise PlanError("<file>", f"cannot read plan file {path}: {error}") from error
        return cls.from_json(text)


def global_batch(workers: int, aggregators: int, batch_aggregator: int,
                 batch_non_aggregator: int) -> int:
    """B^g = K·B^a + (W−K)·B^n  (FasDL Eq. 6)."""
    return aggregators * batch_aggregator + (workers - aggregators) * batch_non_aggregator


def partition_sizes(samples: int, workers: int, aggregators: int, batch_aggregator: int,
                    batch_non_aggregator: int) -> list[int]:
    """Samples per worker, proportional to its batch (thesis Eq. 4-3/4-4, corrected).

    Aggregators get D^a = floor(D·B^a/B^g); the non-aggregators share the rest as evenly as
    possible, so the sizes always sum to D and every worker holds at least
    floor(D/B^g)·B_i samples, enough for the epoch's iterations.
    """
    batch = global_batch(workers, aggregators, batch_aggregator, batch_non_aggregator)
    per_aggregator = samples * batch_aggregator // batch
    sizes = [per_aggregator] * aggregators
    rest = samples - per_aggregator * aggregators
    receivers = workers - aggregators
    if receivers == 0:  # ScatterReduce: spread the remainder over the aggregators
        for index in range(rest):
            sizes[index % workers] += 1
        return sizes
    base, extra = divmod(rest, receivers)
    return sizes + [base + (1 if index < extra else 0) for index in range(receivers)]


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
        raise PlanError(f"{where}{unknown[0]}",
                        f"is not a known field; known fields: {', '.join(sorted(known))}")


def _build(kind: type[_Section], path: str, data: object) -> _Section:
    if not isinstance(data, dict):
        raise PlanError(path, f"must be a JSON object, got {type(data).__name__}")
    _reject_unknown(path, data, {f.name for f in fields(kind)})
    try:
        return kind(**data)
    except TypeError as error:
        missing = re.findall(r"'(\w+)'", str(error))
        name = missing[0] if missing else "?"
        raise PlanError(f"{path}.{name}", f"is missing ({error})") from error
