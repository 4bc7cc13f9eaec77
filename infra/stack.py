"""FasdlStack: composes storage, network (Valkey plans only), compute, workflow and monitoring
from one validated plan, and prints how to start a run. Valkey plans add FasdlCacheStack
(infra/cache.py), the exchange cache alone: :func:`build_stacks` makes both."""

from __future__ import annotations

from aws_cdk import CfnOutput, CfnParameter, CfnRule, CfnRuleAssertion, Environment, Fn, Stack
from constructs import Construct

from fasdl.contract.cache import cache_name, cache_stack_name
from fasdl.contract.training import profiles_path
from infra.cache import FasdlCacheStack
from infra.cache_limits import cache_limits
from infra.checkov import add_skips
from infra.compute import (
    RUNTIME,
    CodeAssets,
    Compute,
    ephemeral_storage_mb,
    plan_environment,
    reserved_worker_concurrency,
)
from infra.monitoring import Monitoring
from infra.nag import add_suppressions
from infra.network import Network
from infra.profiling_workflow import (
    CONTEXT_MEMORIES,
    CONTEXT_PROFILING,
    ProfilingWorkflow,
    profiling_memories,
)
from infra.replan import ReplanFunction, stage_replan_code
from infra.settings import SynthSettings
from infra.storage import Storage
from infra.workflow import TrainingWorkflow

DEFAULT_STACK_NAME = "FasdlStack"
VALKEY = "valkey"
STAND_IN_LAYER = "stand-in"
STAND_IN_REFUSAL = (
    "This template was synthesized with the stand-in torch layer (no torch): its functions "
    "could not train. Build the real layer with `make layer ARCH=<plan arch>` and run "
    "`cdk deploy` again.")


class FasdlStack(Stack):
    """One training deployment: the plan's M, W, channel and arch are baked in."""

    def __init__(self, scope: Construct, construct_id: str = DEFAULT_STACK_NAME, *,
                 settings: SynthSettings, account: str | None = None) -> None:
        plan = settings.plan
        # Region from the plan; account left to the CLI's credentials (no lookups at synth).
        super().__init__(scope, construct_id,
                         env=Environment(account=account, region=plan.deployment.region),
                         description=f"FasDL training stack ({plan.deployment_fingerprint()})")
        self.settings = settings
        self.storage = Storage(self, "Storage")
        self.network = Network(self, "Network") if plan.deployment.channel == VALKEY else None
        self.compute = Compute(
            self, "Compute", deployment=plan.deployment, plan_json=plan_environment(plan),
            ephemeral_mb=ephemeral_storage_mb(plan),
            reserved_worker_concurrency=reserved_worker_concurrency(settings),
            assets=CodeAssets.of(settings), storage=self.storage, stack_name=self.stack_name,
            vpc=self.network.vpc if self.network else None,
            security_group=self.network.worker_security_group if self.network else None,
            cache_name=cache_name(self.stack_name) if self.network else None)
        self.replan = self._build_replan() if plan.training.adaptive != "off" else None
        self.workflow = TrainingWorkflow(
            self, "Workflow", workers=plan.deployment.ceiling,  # an adaptive run's W at most
            timeout_s=plan.deployment.timeout_s, trigger=self.compute.trigger,
            worker=self.compute.worker, finalize=self.compute.finalize,
            memory_mb=plan.deployment.memory_mb,
            inline_map_max_workers=settings.inline_map_max_workers,
            replan=self.replan.function if self.replan is not None else None)
        # Opt-in (-c profiling=true): profiler functions per memory and their state machine.
        memories = profiling_memories(
            {key: self.node.try_get_context(key) for key in (CONTEXT_PROFILING,
                                                              CONTEXT_MEMORIES)},
            plan.deployment.memory_mb)
        self.profiling = (ProfilingWorkflow(self, "Profiling",
                                            plan_memory_mb=plan.deployment.memory_mb,
                                            ephemeral_mb=ephemeral_storage_mb(plan),
                                            compute=self.compute, storage=self.storage,
                                            memories=memories) if memories else None)
        self.monitoring = Monitoring(self, "Monitoring", stack_name=self.stack_name,
                                     state_machine=self.workflow.state_machine,
                                     alarm_email=settings.alarm_email)
        self._add_outputs()
        if settings.torch_layer_is_stub:
            self._refuse_deployment()
        add_suppressions(self)
        add_skips(self)

    def _build_replan(self) -> ReplanFunction:
        """An adaptive plan's re-plan function, with the profiles the plan was made with
        (infra.settings checked that they lie beside it)."""
        plan = self.settings.plan
        return ReplanFunction(
            self, "Replan", code_dir=stage_replan_code(profiles_path(self.settings.plan_path)),
            layer=self.compute.layer, architecture=self.compute.architecture, runtime=RUNTIME,
            environment=self.compute.environment,
            measured_on=f"aws-lambda-{plan.deployment.arch}", results=self.storage.results,
            cache_ecpu_max=(cache_limits(plan).ecpu_per_second if self.network is not None
                            else None))

    def _refuse_deployment(self) -> None:
        """CloudFormation checks template rules before it creates or updates any resource
        (as the CDK's own bootstrap-version rule does), so a template built with the stand-in
        layer synthesizes for tests and local runs but can never be deployed."""
        layer = CfnParameter(self, "TorchLayer", type="String", default=STAND_IN_LAYER,
                             allowed_values=[STAND_IN_LAYER],
                             description="Which torch layer this template was built with")
        CfnRule(self, "RefuseStandInTorchLayer", assertions=[CfnRuleAssertion(
            assert_=Fn.condition_not(Fn.condition_equals(layer.value_as_string,
                                                         STAND_IN_LAYER)),
            assert_description=STAND_IN_REFUSAL)])

    def _add_outputs(self) -> None:
        arn = self.workflow.state_machine.state_machine_arn
        CfnOutput(self, "StateMachineArn", value=arn)
        CfnOutput(self, "DatasetsBucketName", value=self.storage.datasets.bucket_name)
        CfnOutput(self, "ResultsBucketName", value=self.storage.results.bucket_name)
        CfnOutput(self, "ExchangeBucketName", value=self.storage.exchange.bucket_name)
        CfnOutput(self, "WorkerFunctionName", value=self.compute.worker.function_name)
        CfnOutput(self, "ProfilerFunctionName", value=self.compute.profiler.function_name)
        if self.network is not None:
            CfnOutput(self, "CacheName", value=cache_name(self.stack_name))
            CfnOutput(self, "DeployCacheCommand", value=(
                f"npx cdk deploy {cache_stack_name(self.stack_name)} -c plan=<plan.json>  "
                "# before a run; cdk destroy it after one to stop its billing"))
        dataset = self.settings.plan.workload.dataset
        CfnOutput(self, "UploadDatasetCommand", value=Fn.join("", [
            "aws s3 sync <local-dataset-dir> s3://", self.storage.datasets.bucket_name,
            f"/{dataset}/"]))
        CfnOutput(self, "StartRunCommand", value=Fn.join("", [
            "aws stepfunctions start-execution --state-machine-arn ", arn, " --input '{}'"]))
        if self.profiling is not None:
            profiling = self.profiling.state_machine.state_machine_arn
            CfnOutput(self, "ProfilingStateMachineArn", value=profiling)
            CfnOutput(self, "StartProfilingCommand", value=Fn.join("", [
                "aws stepfunctions start-execution --state-machine-arn ", profiling,
                " --name my-profile --input '{\"model\": \"cnn\", \"dataset\": \"cifar10\"}'"]))
            CfnOutput(self, "FetchSamplesCommand", value=Fn.join("", [
                "aws s3 cp s3://", self.storage.results.bucket_name,
                "/profiles/my-profile/samples.jsonl samples.jsonl"]))


def build_stacks(scope: Construct, settings: SynthSettings, *, stack_name: str = DEFAULT_STACK_NAME,
                 account: str | None = None) -> tuple[FasdlStack, FasdlCacheStack | None]:
    """The training stack and, for Valkey plans, its cache stack (which imports the VPC's
    subnets and the cache security group from it, never the other way)."""
    stack = FasdlStack(scope, stack_name, settings=settings, account=account)
    if stack.network is None:
        return stack, None
    cache = FasdlCacheStack(
        scope, cache_stack_name(stack.stack_name), region=settings.plan.deployment.region,
        limits=cache_limits(settings.plan),
        training_stack_name=stack.stack_name, subnets=stack.network.vpc.isolated_subnets,
        security_group=stack.network.cache_security_group, account=account)
    add_suppressions(cache)
    add_skips(cache)
    return stack, cache
