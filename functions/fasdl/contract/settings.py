"""Typed settings from the ``FASDL_*`` environment: every variable's name, parsed (``from_env``)
and rendered (``to_env``); fasdl.exchange.stores builds the clients they imply. Stdlib only: the
trigger runs without torch, numpy or redis.

Besides the contract's variables, local runs and tests may set:

* ``FASDL_S3_PATH_STYLE=1``: path-style S3 addressing (SeaweedFS, MinIO); the endpoint itself
  comes from boto3's own ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``;
* ``FASDL_CACHE_ENDPOINT``/``FASDL_CACHE_PORT``: a fixed cache address (tests); deployed
  stacks set ``FASDL_CACHE_NAME`` and the address comes in the run state (fasdl.contract.cache);
* ``FASDL_CACHE_CLUSTER`` (default 1: ElastiCache Serverless speaks cluster mode; 0 for a
  standalone server) and ``FASDL_CACHE_CA_CERTS`` (a CA bundle for a self-signed local TLS);
* ``FASDL_CACHE_TTL_S``: TTL of exchange keys in Valkey (default 3600);
* ``FASDL_CACHE_DIR``: where partitions are cached across warm invocations (``/tmp/fasdl-data``);
* ``FASDL_TIME_MARGIN_S``: time a worker keeps in reserve before its deadline (default 5);
* ``FASDL_FENCE_CHECK_S``: how often a training worker reads the run's fence (default 10 s;
  fasdl.run.fencing), besides always at its start and before its checkpoint;
* ``FASDL_KEEP_CHECKPOINTS``: how many checkpoints of a run the results bucket keeps, the
  newest of its chain (default 2: the one the next segment resumes from and the one before;
  fasdl.run.retention deletes the others and every dead attempt's once a segment finishes);
* ``FASDL_EXCHANGE_INFLIGHT_MB``: the bytes of shard frames a worker holds at once (uploads
  being sent or kept for reuse, downloads not yet folded). Unset or 0: derived from the plan,
  C = min(max(2·S_m, 64 MB), M/20, 256 MB) (fasdl.exchange.inflight.default_inflight_mb), which is
  what
  the planner's memory model assumes; a larger value can exceed the plan's memory.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from fasdl.contract import keys

_TRUE = frozenset({"1", "true", "yes", "on"})

DEFAULT_FENCE_CHECK_S = 10.0  # one small GET per worker per 10 s: a zombie stops within it
DEFAULT_KEEP_CHECKPOINTS = 2
MAX_KEEP_CHECKPOINTS = 1000
# Variables of one reader each (infra and local/aws/template.py render them by these names); read
# like every other through Settings: from_env, or Settings.read_one where no stack environment
# is (the planner's and the synth's model builds; the torch check before a handler's settings).
WORKER_LOG_GROUP_ENV = "FASDL_WORKER_LOG_GROUP"  # the trigger's: the worker's log group
WORKER_FUNCTION_ENV = "FASDL_WORKER_FUNCTION"  # the trigger's: the worker function's name
STUB_ENV = "FASDL_TORCH_LAYER_STUB"  # tests: a layer without torch (fasdl.aws.torch_setup)
USER_MODULES_ENV = "FASDL_USER_MODULES"  # {reference: module} of the code the synth shipped

# Each Settings field's environment variable: the one list. Handlers parse it
# (Settings.from_env); infra and the local runner render it (Settings.to_env).
ENV_NAMES: Mapping[str, str] = MappingProxyType({
    "stack": "FASDL_STACK",
    "channel": "FASDL_CHANNEL",
    "deployment": "FASDL_DEPLOYMENT",
    "datasets_bucket": "FASDL_DATASETS_BUCKET",
    "results_bucket": "FASDL_RESULTS_BUCKET",
    "exchange_bucket": "FASDL_EXCHANGE_BUCKET",
    "exchange_prefix": "FASDL_EXCHANGE_PREFIX",
    "runs_prefix": "FASDL_RUNS_PREFIX",
    "profiles_prefix": "FASDL_PROFILES_PREFIX",
    "metrics_namespace": "FASDL_METRICS_NAMESPACE",
    "cache_endpoint": "FASDL_CACHE_ENDPOINT",
    "cache_name": "FASDL_CACHE_NAME",
    "cache_port": "FASDL_CACHE_PORT",
    "cache_tls": "FASDL_CACHE_TLS",
    "cache_cluster": "FASDL_CACHE_CLUSTER",
    "cache_ca_certs": "FASDL_CACHE_CA_CERTS",
    "cache_ttl_s": "FASDL_CACHE_TTL_S",
    "s3_path_style": "FASDL_S3_PATH_STYLE",
    "cache_dir": "FASDL_CACHE_DIR",
    "time_margin_s": "FASDL_TIME_MARGIN_S",
    "peer_wait_start_s": "FASDL_PEER_WAIT_START_S",
    "peer_wait_min_s": "FASDL_PEER_WAIT_MIN_S",
    "peer_wait_factor": "FASDL_PEER_WAIT_FACTOR",
    "fence_check_s": "FASDL_FENCE_CHECK_S",
    "keep_checkpoints": "FASDL_KEEP_CHECKPOINTS",
    "plan_json": "FASDL_PLAN",
    "exchange_inflight_mb": "FASDL_EXCHANGE_INFLIGHT_MB",
    "worker_log_group": WORKER_LOG_GROUP_ENV,
    "worker_function": WORKER_FUNCTION_ENV,
    "torch_layer_stub": STUB_ENV,
    "user_modules": USER_MODULES_ENV,
})


class SettingsError(ValueError):
    """A required environment variable is missing or malformed; the message names it."""


def _flag(source: Mapping[str, str], name: str, default: bool) -> bool:
    value = source.get(name)
    return default if value is None or value == "" else value.strip().lower() in _TRUE


def _number(source: Mapping[str, str], name: str, default: float) -> float:
    text = source.get(name, "")
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise SettingsError(f"environment variable {name}: expected a number, "
                            f"got {text!r}") from None


def _whole(source: Mapping[str, str], name: str, default: int) -> int:
    value = _number(source, name, default)
    if not math.isfinite(value) or value != int(value):
        raise SettingsError(f"environment variable {name}: expected a whole number, got "
                            f"{source.get(name)!r}")
    return int(value)


# The stack's key layout and metric namespace (infra deploys these, local runs keep them)
DEFAULT_EXCHANGE_PREFIX = "exchange/"
DEFAULT_RUNS_PREFIX = "runs/"
DEFAULT_PROFILES_PREFIX = "profiles/"  # the profiler's samples, in the results bucket
DEFAULT_METRICS_NAMESPACE = "FasDL"


@dataclass(frozen=True)
class Settings:
    stack: str
    channel: str  # "s3" | "valkey"
    deployment: str  # Plan.deployment_fingerprint() of the deployed stack
    datasets_bucket: str
    results_bucket: str
    exchange_bucket: str
    exchange_prefix: str = DEFAULT_EXCHANGE_PREFIX
    runs_prefix: str = DEFAULT_RUNS_PREFIX
    profiles_prefix: str = DEFAULT_PROFILES_PREFIX
    metrics_namespace: str = DEFAULT_METRICS_NAMESPACE
    cache_endpoint: str = ""  # from the run state (run.cache), or FASDL_CACHE_ENDPOINT
    cache_name: str = ""  # FASDL_CACHE_NAME: the serverless cache the trigger looks up
    cache_port: int = 6379
    cache_tls: bool = False
    cache_cluster: bool = True
    cache_ca_certs: str | None = None
    cache_ttl_s: int = 3600
    s3_path_style: bool = False
    cache_dir: str = "/tmp/fasdl-data"
    time_margin_s: float = 5.0
    # Bounds on a wait for a missing peer's shard (segment_runner.peer_wait_s).
    peer_wait_start_s: float = 120.0
    peer_wait_min_s: float = 10.0
    peer_wait_factor: float = 5.0
    fence_check_s: float = DEFAULT_FENCE_CHECK_S
    keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS
    plan_json: str | None = None  # FASDL_PLAN, the trigger only
    exchange_inflight_mb: float = 0.0  # 0: derived from the plan (exchange_inflight_bytes)
    worker_log_group: str = ""  # the trigger's ("": no REPORT lines to read, in-process tests)
    worker_function: str = ""  # the trigger's ("": no concurrency check, unit tests)
    torch_layer_stub: str = ""  # "1": deployed with the stand-in torch layer
    user_modules: str = ""  # JSON {reference: module}: read with user_module_map

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        source = os.environ if environ is None else environ

        def text(field: str, default: str = "") -> str:
            return source.get(ENV_NAMES[field], "") or default

        def required(field: str) -> str:
            if not text(field):
                raise SettingsError(f"environment variable {ENV_NAMES[field]} is not set")
            return text(field)

        def number(field: str) -> float:
            return _number(source, ENV_NAMES[field], _DEFAULTS[field])

        def flag(field: str) -> bool:
            return _flag(source, ENV_NAMES[field], _DEFAULTS[field])

        channel = required("channel")
        if channel not in ("s3", "valkey"):
            raise SettingsError(f"environment variable {ENV_NAMES['channel']}: must be s3 or "
                                f"valkey, got {channel!r}")
        port_text = text("cache_port", "6379")
        if not port_text.isdigit():
            raise SettingsError(f"environment variable {ENV_NAMES['cache_port']}: expected a "
                                f"port, got {port_text!r}")
        settings = cls(
            stack=text("stack", "fasdl"), channel=channel, deployment=text("deployment"),
            datasets_bucket=required("datasets_bucket"),
            results_bucket=required("results_bucket"),
            exchange_bucket=text("exchange_bucket"),
            exchange_prefix=text("exchange_prefix", DEFAULT_EXCHANGE_PREFIX),
            runs_prefix=text("runs_prefix", DEFAULT_RUNS_PREFIX),
            profiles_prefix=text("profiles_prefix", DEFAULT_PROFILES_PREFIX),
            metrics_namespace=text("metrics_namespace", DEFAULT_METRICS_NAMESPACE),
            cache_endpoint=text("cache_endpoint"), cache_name=text("cache_name"),
            cache_port=int(port_text), cache_tls=flag("cache_tls"),
            cache_cluster=flag("cache_cluster"),
            cache_ca_certs=text("cache_ca_certs") or None,
            cache_ttl_s=int(number("cache_ttl_s")), s3_path_style=flag("s3_path_style"),
            cache_dir=text("cache_dir", "/tmp/fasdl-data"),
            time_margin_s=number("time_margin_s"),
            peer_wait_start_s=number("peer_wait_start_s"),
            peer_wait_min_s=number("peer_wait_min_s"),
            peer_wait_factor=number("peer_wait_factor"),
            fence_check_s=number("fence_check_s"),
            keep_checkpoints=_whole(source, ENV_NAMES["keep_checkpoints"],
                                    DEFAULT_KEEP_CHECKPOINTS),
            plan_json=text("plan_json") or None,
            exchange_inflight_mb=number("exchange_inflight_mb"),
            worker_log_group=text("worker_log_group"),
            worker_function=text("worker_function"),
            torch_layer_stub=text("torch_layer_stub"),
            user_modules=text("user_modules"),
        )
        settings._check()
        return settings

    def _check(self) -> None:
        """What no single variable shows: the channel's own requirements."""
        if not 1 <= self.keep_checkpoints <= MAX_KEEP_CHECKPOINTS:
            raise SettingsError(f"environment variable {ENV_NAMES['keep_checkpoints']}: must be "
                                f"a whole number from 1 to {MAX_KEEP_CHECKPOINTS}, got "
                                f"{self.keep_checkpoints}")
        if not 0.0 <= self.exchange_inflight_mb < float("inf"):
            raise SettingsError(f"environment variable {ENV_NAMES['exchange_inflight_mb']}: "
                                f"must be a size in MB >= 0, got {self.exchange_inflight_mb}")
        if self.channel == "s3" and not self.exchange_bucket:
            raise SettingsError(f"environment variable {ENV_NAMES['exchange_bucket']} is not "
                                "set (required for the s3 channel)")
        if self.channel == "valkey" and not (self.cache_endpoint or self.cache_name):
            raise SettingsError(f"environment variables {ENV_NAMES['cache_name']} and "
                                f"{ENV_NAMES['cache_endpoint']} are not set (the valkey "
                                "channel needs one)")

    @staticmethod
    def read_one(field: str, environ: Mapping[str, str] | None = None) -> str:
        """One setting's variable as text ("" when unset), for a reader that runs where the
        stack's required variables are not set (from_env would refuse)."""
        return (os.environ if environ is None else environ).get(ENV_NAMES[field], "")

    @staticmethod
    def user_module_map(text: str) -> dict[str, str]:
        """``FASDL_USER_MODULES``: the synth's {``file.py:function``: module} map ({} unset)."""
        try:
            shipped = json.loads(text or "{}")
        except ValueError:
            shipped = None
        if not isinstance(shipped, dict) or not all(
                isinstance(value, str) for value in shipped.values()):
            raise SettingsError(f"environment variable {USER_MODULES_ENV}: expected a JSON "
                                f"object of module names, got {text[:80]!r}")
        return shipped

    @staticmethod
    def to_env(**fields: str | int | float | bool) -> dict[str, str]:
        """Settings fields as the environment variables :meth:`from_env` reads (booleans as
        ``1``/``0``), in the order given: what a stack or a local run sets."""
        unknown = sorted(set(fields) - set(ENV_NAMES))
        if unknown:
            raise SettingsError(f"not a setting: {', '.join(unknown)} (fasdl.contract.settings."
                                "ENV_NAMES lists them)")
        return {ENV_NAMES[name]: ("1" if value else "0") if isinstance(value, bool)
                else str(value) for name, value in fields.items()}

    def with_cache(self, endpoint: Mapping[str, Any] | None) -> Settings:
        """These settings with the exchange cache the run state names (``run.cache``)."""
        if endpoint is None:
            return self
        return dataclasses.replace(self, cache_endpoint=str(endpoint["address"]),
                                   cache_port=int(endpoint["port"]))

    # ---- keys: contract/keys.py builds them; results_key adds the bucket's runs prefix ---
    def results_key(self, key: str) -> str:
        """A run's key (contract/keys.py) in the results bucket, under ``runs_prefix``."""
        return keys.results_key(self.runs_prefix, key)

    def plan_key(self, run_id: str) -> str:
        return self.results_key(keys.plan_key(run_id))

    def segments_prefix(self, run_id: str) -> str:
        """Where the workers' segment results are (fasdl.run.results reads them)."""
        return self.results_key(keys.segments_prefix(run_id))

    def segment_result_key(self, run_id: str, index: int, attempt: int, worker: int) -> str:
        return self.results_key(keys.segment_result_key(run_id, index, attempt, worker))

    def summary_key(self, run_id: str) -> str:
        return self.results_key(keys.summary_key(run_id))

    def failure_key(self, run_id: str) -> str:
        return self.results_key(keys.failure_key(run_id))

    def final_key(self, run_id: str, name: str) -> str:
        return self.results_key(keys.final_key(run_id, name))

    def fence_object_key(self, run_id: str) -> str:
        """The run's fence (fasdl.run.fencing) in the results bucket."""
        return self.results_key(keys.fence_key(run_id))

    def exchange_run_prefix(self, run_id: str) -> str:
        """Every exchange key of the run, of every epoch, starts with this."""
        return f"{self.exchange_prefix}{keys.run_prefix(run_id)}"


# the defaults from_env falls back to for an unset or empty variable
_DEFAULTS: dict[str, Any] = {field.name: field.default for field in dataclasses.fields(Settings)}

