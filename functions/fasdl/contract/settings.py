"""Typed settings from the ``FASDL_*`` environment of fasdl/contract/events.py, and the clients
they imply.

Pure stdlib at import time: the trigger runs without torch, numpy or redis, so boto3 and the
channel modules are imported only when a client is built.

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
* ``FASDL_EXCHANGE_INFLIGHT_MB``: the bytes of shard frames a worker holds at once (uploads
  being sent or kept for reuse, downloads not yet folded). Unset or 0: derived from the plan,
  C = min(max(2·S_m, 64 MB), M/20, 256 MB) (fasdl.exchange.inflight.default_inflight_mb), which is
  what
  the planner's memory model assumes; a larger value can exceed the plan's memory.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from fasdl.run.fencing import DEFAULT_FENCE_CHECK_S

if TYPE_CHECKING:
    from fasdl.exchange.channel.base import Channel
    from fasdl.exchange.channel.factory import ChannelConfig

_TRUE = frozenset({"1", "true", "yes", "on"})

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
    "plan_json": "FASDL_PLAN",
    "exchange_inflight_mb": "FASDL_EXCHANGE_INFLIGHT_MB",
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
    plan_json: str | None = None  # FASDL_PLAN, the trigger only
    exchange_inflight_mb: float = 0.0  # 0: derived from the plan (exchange_inflight_bytes)

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
            fence_check_s=number("fence_check_s"), plan_json=text("plan_json") or None,
            exchange_inflight_mb=number("exchange_inflight_mb"),
        )
        settings._check()
        return settings

    def _check(self) -> None:
        """What no single variable shows: the channel's own requirements."""
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

    def exchange_inflight_bytes(self, memory_mb: float, model_mb: float) -> int:
        """The worker's cap on frame bytes: the setting, or the plan's derived default."""
        from fasdl.exchange.inflight import cap_bytes  # numpy: workers only

        return cap_bytes(memory_mb, model_mb, self.exchange_inflight_mb)

    # ---- keys -----------------------------------------------------------------------------
    def run_prefix(self, run_id: str) -> str:
        return f"{self.runs_prefix}{run_id}/"

    def plan_key(self, run_id: str) -> str:
        return f"{self.run_prefix(run_id)}plan.json"

    def segments_prefix(self, run_id: str) -> str:
        """Where the workers' segment results are (fasdl.run.results reads them)."""
        return f"{self.run_prefix(run_id)}segments/"

    def segment_result_key(self, run_id: str, index: int, attempt: int, worker: int) -> str:
        return (f"{self.segments_prefix(run_id)}{index:05d}/attempt-{attempt}/"
                f"worker-{worker:04d}.json")

    def summary_key(self, run_id: str) -> str:
        return f"{self.run_prefix(run_id)}summary.json"

    def failure_key(self, run_id: str) -> str:
        return f"{self.run_prefix(run_id)}failure.json"

    def fence_object_key(self, run_id: str) -> str:
        """The run's fence (fasdl.run.fencing) in the results bucket."""
        from fasdl.contract.keys import fence_key

        return f"{self.runs_prefix}{fence_key(run_id)}"

    def exchange_run_prefix(self, run_id: str) -> str:
        """Every exchange key of the run, of every epoch, starts with this."""
        return f"{self.exchange_prefix}{run_id}/"

    # ---- clients --------------------------------------------------------------------------
    def exchange_config(self, *, retry_fast: bool = False) -> ChannelConfig:
        """The shard exchange: the S3 exchange bucket or the Valkey cache, under the prefix."""
        from fasdl.exchange.channel.factory import ChannelConfig

        if self.channel == "s3":
            return ChannelConfig(kind="s3", prefix=self.exchange_prefix,
                                 bucket=self.exchange_bucket, path_style=self.s3_path_style)
        if not self.cache_endpoint:
            raise SettingsError(f"no endpoint for the exchange cache {self.cache_name!r}: the "
                                "run state's 'cache' field is missing (the trigger sets it)")
        return ChannelConfig(kind="valkey", prefix=self.exchange_prefix, ttl_s=self.cache_ttl_s,
                             host=self.cache_endpoint, port=self.cache_port, tls=self.cache_tls,
                             cluster=self.cache_cluster, ca_certs=self.cache_ca_certs)

    def exchange_channel(self) -> Channel:
        from fasdl.exchange.channel.factory import build_channel

        return build_channel(self.exchange_config())

    def results_store(self, client: Any | None = None) -> Channel:
        """The results bucket under ``runs/``: checkpoints (keys ``{run}/checkpoint/...``)."""
        from fasdl.exchange.channel.s3 import S3Channel

        return S3Channel(self.results_bucket, self.runs_prefix,
                         client=client or self.s3_client())

    def s3_client(self) -> Any:
        """A boto3 S3 client; boto3 itself reads AWS_ENDPOINT_URL_S3 and the credentials."""
        import boto3

        from fasdl.exchange.channel.s3 import s3_client_config

        session = boto3.session.Session()
        return session.client("s3", region_name=session.region_name or "us-east-1",
                              config=s3_client_config(path_style=self.s3_path_style))


# the defaults from_env falls back to for an unset or empty variable
_DEFAULTS: dict[str, Any] = {field.name: field.default for field in dataclasses.fields(Settings)}
