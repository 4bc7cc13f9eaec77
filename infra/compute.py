"""The four Lambda functions: worker, trigger, finalize, profiler.

Worker and profiler run at the plan's memory M and architecture; both join the VPC when the
plan uses the Valkey channel, and so does finalize, which deletes the run's exchange keys from
the cache. The trigger stays outside: it calls AWS APIs (Lambda, ElastiCache) that the
isolated subnets cannot reach, and finds the cache's endpoint for the others
(fasdl.contract.cache). Each function has its own role and log group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aws_cdk import Duration, IgnoreMode, RemovalPolicy, Size
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from fasdl.contract import settings as environment
from fasdl.contract.lambda_quotas import (
    DEFAULT_ACCOUNT_CONCURRENCY,
    EXECUTIONS_PER_WORKER,
    MIN_UNRESERVED_CONCURRENCY,
    QUOTA_CODE,
    QUOTA_NAME,
)
from fasdl.contract.plan import PLAN_MAX_COMPACT_BYTES, Deployment, Plan
from fasdl.contract.settings import STUB_ENV, WORKER_FUNCTION_ENV, WORKER_LOG_GROUP_ENV
from infra import access
from infra.lambda_runtime import PYTHON_RUNTIME, TORCH_TMP_RESERVE_MB, image_tag
from infra.settings import (
    CONTEXT_RESERVE_CONCURRENCY,
    DOCKERFILE,
    FUNCTIONS_DIR,
    REPO_ROOT,
    Packaging,
    SynthSettings,
    SynthSettingsError,
    plan_concurrency_quota,
)
from infra.storage import EXCHANGE_PREFIX, RUNS_PREFIX, Storage
from infra.user_code import (
    REQUIREMENTS_LAYER_ID,
    USER_CODE_LAYER_ID,
    UserCode,
    stage_user_code,
)

# Every function and the layer run on infra.lambda_runtime.PYTHON_RUNTIME (Amazon Linux 2023).
RUNTIME = lambda_.Runtime(PYTHON_RUNTIME, lambda_.RuntimeFamily.PYTHON)
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
TRIGGER_MEMORY_MB = 256
# Fits fasdl.aws.account's wait for an Active worker (<= 90 s, 20 s kept) per start; a longer
# wait is a Step Functions Retry of WorkerNotReady, which holds no Lambda meanwhile.
TRIGGER_TIMEOUT = Duration.seconds(120)
LONG_TIMEOUT = Duration.seconds(900)
MIN_DATA_MB = 1_536  # data partition, checkpoint copies and the extraction archive
MAX_EPHEMERAL_MB = 10_240
# Lambda allows 4 KB for all of a function's environment variables together (Lambda quotas,
# "Function environment variables"); the plan contract keeps its compact JSON within this.
PLAN_ENV_MAX_BYTES = PLAN_MAX_COMPACT_BYTES
METRICS_NAMESPACE = environment.DEFAULT_METRICS_NAMESPACE

ASSET_EXCLUDES = ["tests", "**/tests", "**/__pycache__", "**/*.pyc", "**/.mypy_cache",
                  "**/*.egg-info"]
# Image build context is the repo root; ship only what the image needs.
IMAGE_INCLUDES = ["*", "!functions", "!infra/container", "**/__pycache__", "**/tests"]

WORKER_ID = "Worker"
TRIGGER_ID = "Trigger"
FINALIZE_ID = "Finalize"
PROFILER_ID = "Profiler"
LAYER_ID = "TorchLayer"


def ephemeral_storage_mb(plan: Plan) -> int:
    """/tmp for the torch unpack plus the largest data partition and checkpoint copies."""
    largest = max(plan.partition_sizes())
    partition_mb = plan.workload.dataset_mb * largest / plan.workload.samples
    data_mb = math.ceil(1.5 * partition_mb + 4 * plan.workload.model_mb)
    return min(MAX_EPHEMERAL_MB, TORCH_TMP_RESERVE_MB + max(MIN_DATA_MB, data_mb))


def reserved_worker_concurrency(settings: SynthSettings) -> int | None:
    """2·W reserved for the worker with ``-c reserve_concurrency=true``, else None (W: the
    ceiling of an adaptive run, ``deployment.workers_max``). Lambda
    keeps 100 of the account's concurrency unreserved (PutFunctionConcurrency), so a
    reservation that would leave less of the plan's quota is refused here, not at deploy."""
    if not settings.reserve_concurrency:
        return None
    workers = settings.plan.deployment.ceiling  # an adaptive run's most workers
    reserved = EXECUTIONS_PER_WORKER * workers
    quota = plan_concurrency_quota(settings.plan)
    if quota - reserved < MIN_UNRESERVED_CONCURRENCY:
        raise SynthSettingsError(
            f"context '{CONTEXT_RESERVE_CONCURRENCY}=true' reserves 2·W = 2·{workers} = "
            f"{reserved} concurrent executions for the worker, but the plan's concurrency "
            f"quota is {quota} (quotas.max_concurrency, {DEFAULT_ACCOUNT_CONCURRENCY} when "
            f"absent) and Lambda keeps at least {MIN_UNRESERVED_CONCURRENCY} unreserved: "
            f"{quota} - {reserved} = {quota - reserved} < {MIN_UNRESERVED_CONCURRENCY}. Raise "
            f"the Lambda quota '{QUOTA_NAME}' (Service Quotas code {QUOTA_CODE}) to at least "
            f"{reserved + MIN_UNRESERVED_CONCURRENCY} and plan with --max-concurrency "
            f"{reserved + MIN_UNRESERVED_CONCURRENCY}, or deploy without "
            f"{CONTEXT_RESERVE_CONCURRENCY}")
    return reserved


def plan_environment(plan: Plan) -> str:
    # load_settings already refused a larger plan (naming the field) before any construct.
    text = plan.to_compact_json()
    if len(text.encode()) > PLAN_ENV_MAX_BYTES:
        raise ValueError(f"plan JSON is {len(text)} bytes; at most {PLAN_ENV_MAX_BYTES} fit "
                         "in the trigger's environment (shorten 'provenance')")
    return text


@dataclass(frozen=True, kw_only=True)
class CodeAssets:
    """Where the functions' code and layers come from (resolved from the synth context)."""

    torch_layer_dir: Path
    torch_layer_is_stub: bool  # the stand-in: handlers fail with a clear message
    worker_packaging: Packaging
    requirements_layer_dir: Path | None = None  # workload.requirements' wheels
    user_code: UserCode | None = None  # the plan's own model or loss, staged

    @classmethod
    def of(cls, settings: SynthSettings) -> CodeAssets:
        return cls(torch_layer_dir=settings.torch_layer_dir,
                   torch_layer_is_stub=settings.torch_layer_is_stub,
                   worker_packaging=settings.worker_packaging,
                   requirements_layer_dir=settings.requirements_layer_dir,
                   user_code=stage_user_code(settings.plan))


@dataclass(frozen=True, kw_only=True)
class _Spec:
    """One function's shape; roles, logs and VPC wiring are derived from it."""

    construct_id: str
    handler: str
    description: str
    memory_mb: int
    timeout: Duration
    in_vpc: bool
    ephemeral_mb: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    reserved_concurrency: int | None = None  # ReservedConcurrentExecutions; None: unreserved


class Compute(Construct):
    """Functions, their roles, log groups and the torch layer, from the typed values they
    need: the plan's deployment section, its compact JSON (the trigger's), the /tmp size and
    the worker's reservation (the stack derives them from the plan) and the code assets."""

    def __init__(self, scope: Construct, construct_id: str, *, deployment: Deployment,
                 plan_json: str, ephemeral_mb: int, reserved_worker_concurrency: int | None,
                 assets: CodeAssets, storage: Storage, stack_name: str,
                 vpc: ec2.IVpc | None = None, security_group: ec2.ISecurityGroup | None = None,
                 cache_name: str | None = None) -> None:
        super().__init__(scope, construct_id)
        self._deployment, self._assets = deployment, assets
        self._vpc = vpc
        self._security_group = security_group
        self.roles: dict[str, iam.Role] = {}
        self.log_groups: dict[str, logs.LogGroup] = {}
        self._environment = self._common_environment(stack_name, storage, cache_name)
        self._code = lambda_.Code.from_asset(str(FUNCTIONS_DIR), exclude=ASSET_EXCLUDES)
        self.layer = self._build_layer()
        self.layers = [self.layer]
        if assets.user_code is not None:  # the plan's own model or loss: a layer of its own
            self.layers.append(self._build_user_code_layer(assets.user_code))
            self._environment.update(assets.user_code.environment)
        if assets.requirements_layer_dir is not None:  # workload.requirements' wheels
            self.layers.append(self._build_requirements_layer(assets.requirements_layer_dir))
        timeout = Duration.seconds(deployment.timeout_s)
        in_vpc = vpc is not None

        memory = deployment.memory_mb
        self.worker = self._build_worker(_Spec(
            construct_id=WORKER_ID, handler="handlers.worker.handler",
            description="FasDL K-REDUCE worker: one segment", memory_mb=memory,
            timeout=timeout, in_vpc=in_vpc, ephemeral_mb=ephemeral_mb,
            reserved_concurrency=reserved_worker_concurrency))
        self.trigger = self._build_function(_Spec(
            construct_id=TRIGGER_ID, handler="handlers.trigger.handler",
            description="FasDL run and segment planner", memory_mb=TRIGGER_MEMORY_MB,
            timeout=TRIGGER_TIMEOUT, in_vpc=False,
            extra_env={**environment.Settings.to_env(plan_json=plan_json),
                       WORKER_FUNCTION_ENV: self.worker.function_name,
                       # its REPORT lines tell an out-of-memory kill from a crash
                       WORKER_LOG_GROUP_ENV: self.log_groups[WORKER_ID].log_group_name}))
        self.finalize = self._build_function(_Spec(
            construct_id=FINALIZE_ID, handler="handlers.finalize.handler",
            description="FasDL model, summary, failure record", memory_mb=memory,
            timeout=LONG_TIMEOUT, in_vpc=in_vpc, ephemeral_mb=ephemeral_mb))
        self.profiler = self._build_function(_Spec(
            construct_id=PROFILER_ID, handler="handlers.profiler.handler",
            description="FasDL platform profiler for the planner", memory_mb=memory,
            timeout=LONG_TIMEOUT, in_vpc=in_vpc, ephemeral_mb=ephemeral_mb))

        exchange = storage.exchange if deployment.channel == "s3" else None
        access.grant_worker(self.roles[WORKER_ID], datasets=storage.datasets,
                            results=storage.results, exchange=exchange)
        access.grant_trigger(self.roles[TRIGGER_ID], datasets=storage.datasets,
                             results=storage.results, worker=self.worker, cache_name=cache_name,
                             worker_logs=self.log_groups[WORKER_ID], exchange=exchange)
        access.grant_finalize(self.roles[FINALIZE_ID], results=storage.results,
                              exchange=storage.exchange)
        access.grant_profiler(self.roles[PROFILER_ID], datasets=storage.datasets,
                              results=storage.results, exchange=storage.exchange)

    @property
    def environment(self) -> dict[str, str]:
        """Every function's common variables (a copy), for functions built beside these."""
        return dict(self._environment)

    @property
    def architecture(self) -> lambda_.Architecture:
        return self._architecture

    def _common_environment(self, stack_name: str, storage: Storage,
                            cache_name: str | None) -> dict[str, str]:
        deployment = self._deployment
        env = environment.Settings.to_env(
            stack=stack_name, channel=deployment.channel, deployment=deployment.fingerprint(),
            datasets_bucket=storage.datasets.bucket_name,
            results_bucket=storage.results.bucket_name,
            exchange_bucket=storage.exchange.bucket_name, exchange_prefix=EXCHANGE_PREFIX,
            runs_prefix=RUNS_PREFIX, profiles_prefix=access.PROFILES_PREFIX,
            metrics_namespace=METRICS_NAMESPACE)
        if cache_name is not None:  # the endpoint comes in the run state (run.cache)
            # serverless caches accept TLS connections only
            env.update(environment.Settings.to_env(cache_name=cache_name, cache_tls=True))
        if self._assets.torch_layer_is_stub:
            env[STUB_ENV] = "1"  # lets handlers fail with a clear message
        return env

    def _build_layer(self) -> lambda_.LayerVersion:
        return lambda_.LayerVersion(
            self, LAYER_ID,
            code=lambda_.Code.from_asset(str(self._assets.torch_layer_dir),
                                         exclude=["**/__pycache__"]),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[self._architecture],
            description="Stripped torch (tar.zst, unpacked into /tmp at cold start) + runtime deps",
            removal_policy=RemovalPolicy.DESTROY,
        )

    def _build_user_code_layer(self, user_code: UserCode) -> lambda_.LayerVersion:
        return lambda_.LayerVersion(
            self, USER_CODE_LAYER_ID,
            code=lambda_.Code.from_asset(str(user_code.staging)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[self._architecture],
            description="Your own model/loss code (python/ is on sys.path)",
            removal_policy=RemovalPolicy.DESTROY,
        )

    def _build_requirements_layer(self, layer_dir: Path) -> lambda_.LayerVersion:
        return lambda_.LayerVersion(
            self, REQUIREMENTS_LAYER_ID,
            code=lambda_.Code.from_asset(str(layer_dir), exclude=["**/__pycache__"]),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[self._architecture],
            description="The packages of workload.requirements (python/ is on sys.path)",
            removal_policy=RemovalPolicy.DESTROY,
        )

    @property
    def _architecture(self) -> lambda_.Architecture:
        arch = self._deployment.arch
        return lambda_.Architecture.ARM_64 if arch == "arm64" else lambda_.Architecture.X86_64

    def _prepare(self, spec: _Spec) -> tuple[iam.Role, logs.LogGroup]:
        role = access.build_role(self, f"{spec.construct_id}Role", spec.description)
        group = logs.LogGroup(self, f"{spec.construct_id}Logs", retention=LOG_RETENTION,
                              removal_policy=RemovalPolicy.DESTROY)
        access.allow_logs(role, group)
        if spec.in_vpc:
            access.allow_vpc_enis(role)
        self.roles[spec.construct_id] = role
        self.log_groups[spec.construct_id] = group
        return role, group

    def _vpc_props(self, spec: _Spec) -> dict[str, object]:
        if not spec.in_vpc or self._vpc is None or self._security_group is None:
            return {}
        return {
            "vpc": self._vpc,
            "vpc_subnets": ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED),
            "security_groups": [self._security_group],
        }

    def _function_props(self, spec: _Spec) -> dict[str, Any]:
        """What zip and image functions share: sizing, role, logs, VPC placement."""
        role, group = self._prepare(spec)
        return {
            "architecture": self._architecture,
            "description": spec.description,
            "memory_size": spec.memory_mb,
            "timeout": spec.timeout,
            "ephemeral_storage_size": (Size.mebibytes(spec.ephemeral_mb)
                                       if spec.ephemeral_mb else None),
            "role": role,
            "log_group": group,
            "reserved_concurrent_executions": spec.reserved_concurrency,
            **self._vpc_props(spec),
        }

    def _build_function(self, spec: _Spec) -> lambda_.Function:
        return lambda_.Function(
            self, spec.construct_id,
            runtime=RUNTIME,
            handler=spec.handler,
            code=self._code,
            # Every function needs the layer's runtime deps (numpy, redis, Powertools);
            # only the worker and profiler unpack its torch archive.
            layers=self.layers,
            environment={**self._environment, **spec.extra_env},
            **self._function_props(spec),
        )

    def build_profiler(self, memory_mb: int, *, timeout: Duration,
                       ephemeral_mb: int | None) -> lambda_.Function:
        """A profiler at ``memory_mb`` (construct ``Profiler<M>``, its own role and log group)
        with the runtime, layer, environment and VPC wiring of every other function."""
        return self._build_function(_Spec(
            construct_id=f"Profiler{memory_mb}", handler="handlers.profiler.handler",
            description=f"FasDL profiler at {memory_mb} MB", memory_mb=memory_mb,
            timeout=timeout, in_vpc=self._vpc is not None, ephemeral_mb=ephemeral_mb))

    def _build_worker(self, spec: _Spec) -> lambda_.Function:
        if self._assets.worker_packaging == "zip":
            return self._build_function(spec)
        return self._build_image_worker(spec)

    def _build_image_worker(self, spec: _Spec) -> lambda_.Function:
        # torch is baked into the image (10 GB limit), so no layer and no /tmp unpack.
        platform = (ecr_assets.Platform.LINUX_ARM64 if self._architecture
                    == lambda_.Architecture.ARM_64 else ecr_assets.Platform.LINUX_AMD64)
        code = lambda_.DockerImageCode.from_image_asset(
            str(REPO_ROOT), file=DOCKERFILE, platform=platform,
            exclude=IMAGE_INCLUDES, ignore_mode=IgnoreMode.DOCKER,
            build_args={"PYTHON_IMAGE": image_tag()}, cmd=[spec.handler])
        return lambda_.DockerImageFunction(
            self, spec.construct_id,
            code=code,
            environment={key: value for key, value in self._environment.items()
                         if key != STUB_ENV},
            **self._function_props(spec),
        )
