"""Synth-time settings: the plan and the packaging options, resolved from CDK context.

Context keys (``cdk synth -c key=value`` or ``cdk.json``):

``plan``              path of a planner ``plan.json``; default :data:`DEFAULT_PLAN_PATH`
                      (W=4 CNN on digits, S3 channel, x86_64).
``workload``          a workload file (``python -m planner workload new`` wrote it, or a
                      profile) that replaces the plan's workload, prediction dropped: deploys
                      the code of a workload not planned yet, to profile it on AWS
                      (docs/profiling.md). The plan's deployment and training stay.
``torch_layer``       directory of the built torch layer; default ``layers/torch/dist``
                      (``make layer``). When it holds no finished build (no
                      ``torch.tar.zst.json`` manifest), the tiny stand-in ``layers/torch/stub``
                      is used and a warning is printed: the deployed functions would lack torch.
                      A build for another CPU architecture than the plan's, or for another
                      runtime or CPython ABI than infra.lambda_runtime's, is an error.
``requirements_layer``  directory of the layer of ``workload.requirements`` (the user's extra
                      wheels), built by ``layers/torch/requirements_layer.py``; default
                      ``layers/requirements/dist``. Needed only when the plan names a
                      requirements file and the torch layer is a real build; its manifest must
                      be of that file's exact bytes and the torch layer's target. With the
                      stand-in torch layer (local runs) the layer is the file's local one,
                      built for this machine's Python from the same pins
                      (fasdl.contract.requirements.local_layer), which the emulated
                      functions put on their path as Lambda does.
``worker_packaging``  ``zip`` (default: asset + torch layer) or ``image`` (container image
                      built from ``infra/container/Dockerfile`` at deploy time; needs Docker).
``alarm_email``       address subscribed (by email, after its owner confirms) to the
                      failed-execution alarm; default none: no topic, the alarm notifies nobody.
``reserve_concurrency``  ``true`` reserves 2·W concurrent executions for the worker function
                      (a retried segment may overlap the aborted one's workers); default
                      ``false``: workers share the account's unreserved pool.
``inline_map_max_workers``  largest W trained by an inline Map, 1 to 40 (default 40, the
                      inline Map's concurrency limit); a larger W uses a Distributed Map.
                      Lower it to run the Distributed Map path with few workers (tests).

The plan is validated here, before any construct exists, so an invalid plan fails synth with
the plan's own :class:`~fasdl.contract.plan.PlanError` message. Two checks are the stack's: a
plan whose ``deployment.memory_mb`` is above the account limit it records
(``quotas.account_max_memory_mb``, from ``planner plan --account``) is refused, and so is a
Valkey plan of one worker (nothing to exchange; see :func:`check_channel_has_exchange`), an
adaptive run's ceiling beyond the plan's concurrency (:func:`check_ceiling`), and an adaptive
plan without the profiles it was made with beside it (:func:`check_adaptive_profiles`).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, cast

from fasdl.contract.lambda_quotas import DEFAULT_ACCOUNT_CONCURRENCY, EXECUTIONS_PER_WORKER
from fasdl.contract.plan import Plan, PlanError
from fasdl.contract.requirements import REQUIREMENTS_MANIFEST, local_layer, requirements_digest
from fasdl.contract.training import profiles_path
from fasdl.contract.workload import Workload
from infra.lambda_runtime import (
    PYTHON_RUNTIME,
    TORCH_TMP_RESERVE_MB,
    UNZIPPED_CODE_LIMIT,
    lambda_target,
    tree_bytes,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PLAN_PATH = REPO_ROOT / "infra" / "default_plan.json"
DEFAULT_TORCH_LAYER = "layers/torch/dist"
STUB_TORCH_LAYER = REPO_ROOT / "layers" / "torch" / "stub"
FUNCTIONS_DIR = REPO_ROOT / "functions"
DOCKERFILE = "infra/container/Dockerfile"
# Written last by layers/torch/build.py: its presence marks a finished build.
LAYER_MANIFEST = "torch.tar.zst.json"

CONTEXT_PLAN = "plan"
CONTEXT_WORKLOAD = "workload"
CONTEXT_TORCH_LAYER = "torch_layer"
CONTEXT_PACKAGING = "worker_packaging"
CONTEXT_REQUIREMENTS_LAYER = "requirements_layer"
DEFAULT_REQUIREMENTS_LAYER = "layers/requirements/dist"
PACKAGINGS: tuple[str, ...] = ("zip", "image")
CONTEXT_ALARM_EMAIL = "alarm_email"
# One @, no spaces, a dot in the domain: catches typos and placeholders; SNS's confirmation
# mail is the real check.
EMAIL_PATTERN = re.compile(r"[^@\s,;]+@[^@\s,;]+\.[^@\s.,;]+")

CONTEXT_RESERVE_CONCURRENCY = "reserve_concurrency"
CONTEXT_INLINE_MAP_MAX_WORKERS = "inline_map_max_workers"
# An inline Map runs at most 40 iterations at once; all W workers must run together.
INLINE_MAP_LIMIT = 40

Packaging = Literal["zip", "image"]

STUB_WARNING = (
    "WARNING: no built torch layer in {missing}; using the stand-in {stub}. "
    "The deployed worker, finalize and profiler functions will NOT have torch. "
    "Build the real layer with `make layer` (layers/torch/build.py), or pass "
    "-c torch_layer=<dir>, before `cdk deploy`."
)


class SynthSettingsError(ValueError):
    """Invalid synth context (not the plan: that raises PlanError)."""


@dataclass(frozen=True)
class SynthSettings:
    plan: Plan
    plan_path: Path
    torch_layer_dir: Path
    torch_layer_is_stub: bool
    worker_packaging: Packaging
    alarm_email: str | None = None
    reserve_concurrency: bool = False
    inline_map_max_workers: int = INLINE_MAP_LIMIT
    requirements_layer_dir: Path | None = None  # the layer of workload.requirements


def _resolve(path: str | Path) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() else REPO_ROOT / candidate


def load_settings(context: dict[str, object], *, warn: bool = True) -> SynthSettings:
    """Resolve context values into :class:`SynthSettings`; raises PlanError for a bad plan."""
    plan_arg = context.get(CONTEXT_PLAN)
    plan_path = _resolve(str(plan_arg)) if plan_arg else DEFAULT_PLAN_PATH
    plan = Plan.load(plan_path)  # PlanError propagates unchanged, before any construct
    plan = _with_workload(plan, context.get(CONTEXT_WORKLOAD))
    plan.check_environment_size()  # the trigger's environment carries it
    check_account_memory(plan)
    check_channel_has_exchange(plan)
    check_ceiling(plan)
    check_adaptive_profiles(plan, plan_path)

    packaging = str(context.get(CONTEXT_PACKAGING) or "zip")
    if packaging not in PACKAGINGS:
        raise SynthSettingsError(
            f"context '{CONTEXT_PACKAGING}' must be one of {', '.join(PACKAGINGS)}, "
            f"got {packaging!r}")

    alarm_email = _alarm_email(context.get(CONTEXT_ALARM_EMAIL))
    layer_dir = _resolve(str(context.get(CONTEXT_TORCH_LAYER) or DEFAULT_TORCH_LAYER))
    is_stub = layer_dir.resolve() == STUB_TORCH_LAYER.resolve()
    if not is_stub and not (layer_dir / LAYER_MANIFEST).is_file():
        if warn:
            print(STUB_WARNING.format(missing=layer_dir, stub=STUB_TORCH_LAYER),
                  file=sys.stderr)
        layer_dir, is_stub = STUB_TORCH_LAYER, True
    if not is_stub:
        _check_layer_target(layer_dir, plan.deployment.arch)
    requirements = _local_requirements_layer(plan) if is_stub else _requirements_layer(
        plan, _resolve(str(context.get(CONTEXT_REQUIREMENTS_LAYER)
                           or DEFAULT_REQUIREMENTS_LAYER)), layer_dir)
    return SynthSettings(plan=plan, plan_path=plan_path, torch_layer_dir=layer_dir,
                    torch_layer_is_stub=is_stub, worker_packaging=cast(Packaging, packaging),
                    alarm_email=alarm_email,
                    reserve_concurrency=_flag(context, CONTEXT_RESERVE_CONCURRENCY),
                    inline_map_max_workers=_inline_map_max_workers(
                        context.get(CONTEXT_INLINE_MAP_MAX_WORKERS)),
                    requirements_layer_dir=requirements)


def check_account_memory(plan: Plan) -> None:
    """A plan made with ``planner plan --account`` records the account's function-memory limit
    (``quotas.account_max_memory_mb``, planner/commands/account.py); above it Lambda refuses to
    create the functions, so the synth refuses first."""
    quotas = plan.quotas
    if quotas is None or quotas.account_max_memory_mb is None:
        return
    memory, limit = plan.deployment.memory_mb, quotas.account_max_memory_mb
    if memory > limit:
        who = quotas.account or "the account"
        raise PlanError("deployment.memory_mb",
                        f"is {memory} MB, above the {limit} MB function-memory limit recorded "
                        f"in quotas.account_max_memory_mb (python -m planner account: "
                        f"{who}); Lambda would refuse to create the functions. Plan again "
                        f"with --account, or set deployment.memory_mb <= {limit}; if AWS has "
                        "raised the limit, rerun python -m planner account --max-memory N")


def check_channel_has_exchange(plan: Plan) -> None:
    """One worker exchanges nothing, yet a Valkey plan deploys a VPC and a serverless cache:
    such a plan is refused (the planner writes an S3 plan for W = 1 instead)."""
    if plan.deployment.channel == "valkey" and plan.deployment.workers == 1:
        raise PlanError("deployment.channel",
                        "is 'valkey' with deployment.workers = 1: one worker exchanges "
                        "nothing, so the VPC and cache a Valkey plan deploys would serve no "
                        "one; set deployment.channel to 's3' (the same training, no cache)")


def plan_concurrency_quota(plan: Plan) -> int:
    """The account concurrency the plan was made for: the planner's --max-concurrency
    (``quotas.max_concurrency``, planner/search/quotas.py), or Lambda's default for a plan
    without quotas (made for the default ones; fasdl.contract.plan refuses an older plan that
    kept them in its provenance)."""
    return plan.quotas.max_concurrency if plan.quotas is not None else DEFAULT_ACCOUNT_CONCURRENCY


def check_ceiling(plan: Plan) -> None:
    """An adaptive run's ceiling (``deployment.workers_max``) must fit the concurrency the plan
    was made for, 2 executions per worker (a retried segment overlaps its aborted one), as
    the planner keeps W; the stack's Map, reserved concurrency and cache are sized for it."""
    ceiling = plan.deployment.workers_max
    if ceiling is None:
        return
    quota, needed = plan_concurrency_quota(plan), EXECUTIONS_PER_WORKER * ceiling
    if needed > quota:
        raise PlanError("deployment.workers_max",
                        f"is {ceiling}: {EXECUTIONS_PER_WORKER}·{ceiling} = {needed} concurrent "
                        f"executions exceed the plan's concurrency quota {quota} "
                        f"(quotas.max_concurrency; Lambda's default "
                        f"{DEFAULT_ACCOUNT_CONCURRENCY} when absent); allowed range is "
                        f"[{plan.deployment.workers}, {quota // EXECUTIONS_PER_WORKER}]")
    if plan.training.adaptive == "off":
        raise PlanError("deployment.workers_max",
                        f"is {ceiling} but training.adaptive is 'off': only an adaptive run "
                        "uses a ceiling, and the stack would be sized for workers that never "
                        "run; set training.adaptive to deadline or cost, or drop workers_max")


def check_adaptive_profiles(plan: Plan, plan_path: Path) -> None:
    """An adaptive plan re-plans from the profiles it was made with, which ``planner plan
    --out`` writes beside it (fasdl.contract.training); the synth ships them with the
    re-plan function, so a plan without them is refused here, not at its first boundary."""
    if plan.training.adaptive == "off":
        return
    profiles = profiles_path(plan_path)
    if not profiles.is_file():
        raise PlanError("training.adaptive",
                        f"is {plan.training.adaptive!r}, and an adaptive run re-plans from the "
                        f"profiles the plan was made with, expected in {profiles} (python -m "
                        "planner plan ... --out PLAN writes them beside PLAN); plan again "
                        "with --out, or set training.adaptive to 'off'")


def _flag(context: dict[str, object], key: str) -> bool:
    """A boolean context value: true/false (any case), as ``-c key=true`` passes a string."""
    value = context.get(key)
    if value is None or value == "" or value is False or str(value).lower() == "false":
        return False
    if value is True or str(value).lower() == "true":
        return True
    raise SynthSettingsError(f"context '{key}' must be true or false, got {value!r}")


def _inline_map_max_workers(value: object) -> int:
    if value is None or value == "":
        return INLINE_MAP_LIMIT
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if not 1 <= number <= INLINE_MAP_LIMIT:
        raise SynthSettingsError(
            f"context '{CONTEXT_INLINE_MAP_MAX_WORKERS}' must be a whole number from 1 to "
            f"{INLINE_MAP_LIMIT}, got {value!r}")
    return number


def _alarm_email(value: object) -> str | None:
    """The alarm subscription address, or None when the context key is absent or empty."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not EMAIL_PATTERN.fullmatch(value.strip()):
        raise SynthSettingsError(
            f"context '{CONTEXT_ALARM_EMAIL}' must be one email address like "
            f"you@example.com, got {value!r}")
    return value.strip()


def _check_layer_target(layer_dir: Path, arch: str) -> None:
    """The built layer must be for the plan's arch and the functions' runtime and ABI."""
    try:
        manifest = json.loads((layer_dir / LAYER_MANIFEST).read_text())
    except (OSError, ValueError) as error:
        raise SynthSettingsError(f"unreadable torch layer manifest in {layer_dir}: "
                                 f"{error}") from error
    rebuild = (f"rebuild with `make layer ARCH={arch}` (layers/torch/build.py) or pass "
               "-c torch_layer=<dir>")
    if manifest.get("arch") != arch:
        raise SynthSettingsError(
            f"torch layer {layer_dir} was built for {manifest.get('arch')!r} but the plan's "
            f"deployment.arch is {arch!r}; rebuild with `python layers/torch/build.py --arch "
            f"{arch}` or pass -c torch_layer=<dir>")
    target = lambda_target(arch)
    built = (manifest.get("runtime"), manifest.get("python"))
    if built != (PYTHON_RUNTIME, target.abi):
        raise SynthSettingsError(
            f"torch layer {layer_dir} was built for runtime {built[0]!r} / {built[1]!r}, but the "
            f"functions run on {target.describe()}; {rebuild}")
    unpacked_mb = int(manifest.get("unpacked_bytes", 0)) / 2**20
    if unpacked_mb > TORCH_TMP_RESERVE_MB:
        raise SynthSettingsError(
            f"torch layer {layer_dir} unpacks to {unpacked_mb:.0f} MiB, over the "
            f"{TORCH_TMP_RESERVE_MB} MiB of /tmp the stack reserves for it "
            "(infra.lambda_runtime.TORCH_TMP_RESERVE_MB); strip more or raise the reserve")



def _with_workload(plan: Plan, value: object) -> Plan:
    """The plan with the workload of a workload file (its Workload fields; the fitted
    coefficients and the recipe are the planner's); the plan's prediction is not this
    workload's, so it is dropped."""
    if value is None or value == "":
        return plan
    path = _resolve(str(value))
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SynthSettingsError(f"context '{CONTEXT_WORKLOAD}': cannot read {path}: "
                                 f"{error}") from None
    if not isinstance(data, dict):
        raise SynthSettingsError(f"context '{CONTEXT_WORKLOAD}': {path} must hold a JSON "
                                 "object (python -m planner workload new writes one)")
    names = {item.name for item in fields(Workload)}
    document = plan.to_dict()
    document.pop("prediction", None)
    document["workload"] = {key: item for key, item in data.items() if key in names}
    document["provenance"] = {**plan.provenance, "workload": f"-c workload={value}"}
    try:
        return Plan.from_dict(document)
    except PlanError as error:
        raise SynthSettingsError(f"context '{CONTEXT_WORKLOAD}': {path}: {error}") from None


def _local_requirements_layer(plan: Plan) -> Path | None:
    """With the stand-in torch layer the functions run only locally (python -m local): their
    requirements layer is the local one, built for this machine from the same pins."""
    file = plan.workload.requirements
    return None if file is None else local_layer(Path(file))


def _requirements_layer(plan: Plan, layer_dir: Path, torch_layer_dir: Path) -> Path | None:
    """The built layer of workload.requirements: of the file's exact bytes, for the torch
    layer's target, and the layers and function code within Lambda's unzipped limit."""
    file = plan.workload.requirements
    if file is None:
        return None
    path = Path(file)  # its pins: app.py's check_own_code (fasdl.training.model_check)
    if not path.is_file():
        raise PlanError("workload.requirements", f"file {file} not found")
    build = (f"build it with `python layers/torch/requirements_layer.py --requirements {file}` "
             f"or pass -c {CONTEXT_REQUIREMENTS_LAYER}=<dir>")
    try:
        manifest = json.loads((layer_dir / REQUIREMENTS_MANIFEST).read_text())
        torch_manifest = json.loads((torch_layer_dir / LAYER_MANIFEST).read_text())
    except (OSError, ValueError):
        raise SynthSettingsError(f"workload.requirements: no built layer of {file} in "
                                 f"{layer_dir}; {build}") from None
    if manifest.get("requirements_sha256") != requirements_digest(path):
        raise SynthSettingsError(f"workload.requirements: the layer in {layer_dir} was built "
                                 f"from another version of {file}; re{build.removeprefix('b')}")
    built = [manifest.get(key) for key in ("arch", "runtime", "python")]
    torch = [torch_manifest.get(key) for key in ("arch", "runtime", "python")]
    if built != torch:
        raise SynthSettingsError(f"workload.requirements: the layer in {layer_dir} is for "
                                 f"{built}, the torch layer for {torch}; re"
                                 f"{build.removeprefix('b')}")
    total = sum(tree_bytes(folder) for folder in (layer_dir, torch_layer_dir, FUNCTIONS_DIR))
    if total > UNZIPPED_CODE_LIMIT:
        raise SynthSettingsError(f"workload.requirements: the layers and the function code "
                                 f"take {total:,} bytes unzipped, over Lambda's limit of "
                                 f"{UNZIPPED_CODE_LIMIT:,}; ship fewer packages")
    return layer_dir


__all__ = ["PlanError", "SynthSettings", "SynthSettingsError", "load_settings"]
