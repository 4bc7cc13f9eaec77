#!/usr/bin/env python3
"""CDK entry point: `cdk synth|deploy [-c plan=plan.json] [-c workload=FILE]
[-c torch_layer=DIR] [-c requirements_layer=DIR] [-c worker_packaging=zip|image]
[-c alarm_email=you@example.com] [-c nag=true] [-c account=123456789012] [-c stack_name=NAME]
[-c reserve_concurrency=true] [-c inline_map_max_workers=1..40]`
(infra/settings.py says what each does).

The plan is loaded and validated before any construct is created, so an invalid plan stops
synth with the plan's own PlanError message (exit code 2). Without `-c plan=...` the documented
default plan (infra/default_plan.json: W=4 CNN on digits, S3 channel, x86_64) is used. The
stack's region is the plan's `deployment.region`; the account comes from the CLI credentials,
so synth makes no AWS calls (cdk.context.json covers `-c account=123456789012`).

Valkey plans synthesize two stacks: FasdlStack and FasdlCacheStack (the cache alone, to be
destroyed between runs), so deploy with --all.

A deployment, end to end:
    python layers/torch/build.py --arch <plan arch>     # the torch layer (make layer)
    npx cdk deploy --all -c plan=plan.json
    aws s3 sync <dataset dir> s3://<DatasetsBucketName>/<workload.dataset>/   # see outputs
    aws stepfunctions start-execution --state-machine-arn <StateMachineArn> --input '{}'
"""

from __future__ import annotations

import re
import sys

import aws_cdk as cdk

from fasdl.contract.user_code import UserCodeError
from infra.compute import reserved_worker_concurrency
from infra.nag import add_checks
from infra.profiling_workflow import CONTEXT_MEMORIES, CONTEXT_PROFILING, profiling_memories
from infra.settings import PlanError, SynthSettings, SynthSettingsError, load_settings
from infra.stack import DEFAULT_STACK_NAME, build_stacks

CONTEXT_KEYS = ("plan", "workload", "torch_layer", "requirements_layer", "worker_packaging",
                "alarm_email", "nag", "account", "stack_name", "reserve_concurrency",
                "inline_map_max_workers")
# CloudFormation's stack-name rule, less room for the cache stack's "Cache" suffix.
STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,122}")
ACCOUNT = re.compile(r"\d{12}")


def preflight(app: cdk.App, settings: SynthSettings) -> None:
    """The checks the constructs would make later, once assets are staged, made now."""
    reserved_worker_concurrency(settings)
    profiling_memories({key: app.node.try_get_context(key)
                        for key in (CONTEXT_PROFILING, CONTEXT_MEMORIES)},
                       settings.plan.deployment.memory_mb)
    name, account = app.node.try_get_context("stack_name"), app.node.try_get_context("account")
    if name and not STACK_NAME.fullmatch(str(name)):
        raise SynthSettingsError(f"context 'stack_name' must be a letter then up to 122 letters, "
                            f"digits or '-', got {name!r}")
    if account and not ACCOUNT.fullmatch(str(account)):
        raise SynthSettingsError(f"context 'account' must be a 12-digit AWS account id, got "
                            f"{account!r}")
    check_own_code(settings)


def check_own_code(settings: SynthSettings) -> None:
    """The workload's model is built here as a worker will build it (a model of the user's own
    on the meta device; a registry name is looked up), so an unknown name or a wrong file,
    function, signature or shape fails the synth, not a run."""
    workload = settings.plan.workload
    own_code = workload.model_ref.code is not None or workload.loss_ref.code is not None
    if own_code and settings.worker_packaging == "image":
        raise SynthSettingsError("context 'worker_packaging': image does not ship your own "
                                 "model code yet; use zip (the default)")
    from fasdl.training.model_check import check_workload

    check_workload(workload)


def main() -> None:
    app = cdk.App()
    context = {key: app.node.try_get_context(key) for key in CONTEXT_KEYS}
    try:
        settings = load_settings(context)
        preflight(app, settings)
    except (PlanError, SynthSettingsError, UserCodeError) as error:
        # One line and exit 2 before any construct exists, so no asset is staged.
        print(f"fasdl: invalid synth input: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    account = context.get("account")
    stacks = build_stacks(app, settings,
                          stack_name=str(context.get("stack_name") or DEFAULT_STACK_NAME),
                          account=str(account) if account else None)
    if str(context.get("nag") or "").lower() in ("1", "true", "yes"):
        for stack in stacks:
            if stack is not None:
                add_checks(stack)
    app.synth()


if __name__ == "__main__":
    main()
