"""The synthesized CloudFormation template, made runnable here.

:func:`synthesize` runs the real CLI (``npx cdk synth``, offline) for a plan into an outdir.
:func:`load_template` reads ``<outdir>/<stack>.template.json``: the state machine's
DefinitionString with every token resolved (Lambda ``Fn::GetAtt Arn`` becomes a fake but
well-formed ARN naming the function's logical id, pseudo parameters get fixed values), and
each Lambda function's handler, timeout, memory, environment and staged code dir.
:meth:`LocalTemplate.function_specs` then binds the environment's unresolved references
(bucket names, cache endpoint) to the local servers; a reference it cannot bind is an error.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasdl.contract.settings import ENV_NAMES, STUB_ENV, WORKER_LOG_GROUP_ENV, Settings
from infra.user_code import REQUIREMENTS_LAYER_ID, USER_CODE_LAYER_ID
from local.lambda_.invocation import FunctionSpec
from local.servers.managed import HOST, RedisTlsClusterServer, SeaweedS3Server, ValkeyServer

LOCAL_WORKER_LOG_GROUP = "/aws/lambda/fasdl-local-worker"
ACCOUNT = "123456789012"  # moto's default account: the continue-as-new ARN must match it
REPO_ROOT = Path(__file__).resolve().parents[2]  # local/aws/template.py
STUB_LAYER = REPO_ROOT / "layers" / "torch" / "stub"
SYNTH_TIMEOUT_S = 240
# Layers whose python/ goes on the emulated functions' PYTHONPATH (torch is the venv's own)
OWN_LAYER_IDS = (USER_CODE_LAYER_ID, REQUIREMENTS_LAYER_ID)
# A folder of synths keyed by what the CLI is given (plan bytes, context, stack name): set by the
# test suite and the benchmarks for one session, whose runs synthesize the same few plans again
# and again. It assumes the source and the files a plan names do not change while it is set.
SYNTH_CACHE_ENV = "FASDL_SYNTH_CACHE"
_OFFLINE_ENV = {"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
                "CDK_DISABLE_VERSION_CHECK": "1", "CDK_DISABLE_CLI_TELEMETRY": "true"}


class TemplateError(RuntimeError):
    """The template cannot be synthesized or made runnable; the message says why."""


def function_arn(logical_id: str, region: str) -> str:
    return f"arn:aws:lambda:{region}:{ACCOUNT}:function:{logical_id}"


def synthesize(plan_path: Path, outdir: Path, *, stack_name: str | None = None,
               context: Mapping[str, str] | None = None) -> Path:
    """``npx cdk synth`` of this repo's app for ``plan_path``; returns the template path.
    ``context`` adds ``-c key=value`` pairs (e.g. ``profiling=true``). With
    ``$FASDL_SYNTH_CACHE`` set, a synth of the same inputs is copied from there."""
    cache = os.environ.get(SYNTH_CACHE_ENV)
    if not cache:
        return _synthesize(plan_path, outdir, stack_name=stack_name, context=context)
    key = hashlib.sha256(json.dumps(
        [Path(plan_path).read_text(), stack_name, sorted((context or {}).items())]).encode()
    ).hexdigest()[:24]
    cached = Path(cache) / key
    cached.parent.mkdir(parents=True, exist_ok=True)
    with open(cached.parent / f"{key}.lock", "w") as lock:  # one synth per key across processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cached / ".complete").is_file():
            shutil.rmtree(cached, ignore_errors=True)
            _synthesize(plan_path, cached, stack_name=stack_name, context=context)
            (cached / ".complete").touch()
    shutil.copytree(cached, outdir, symlinks=True, dirs_exist_ok=True)
    return training_template(outdir)


def _synthesize(plan_path: Path, outdir: Path, *, stack_name: str | None,
                context: Mapping[str, str] | None) -> Path:
    # The app runs under this interpreter (cdk.json's default is the project's .venv).
    command = ["npx", "--no-install", "cdk", "synth", "--no-notices", "-q", "-o", str(outdir),
               "--app", f"{sys.executable} app.py",
               "-c", f"plan={plan_path}", "-c", f"torch_layer={STUB_LAYER}"]
    if stack_name:
        command += ["-c", f"stack_name={stack_name}"]
    for key, value in (context or {}).items():
        command += ["-c", f"{key}={value}"]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    try:
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=SYNTH_TIMEOUT_S, check=False,
                              env={**os.environ, **_OFFLINE_ENV, "PATH": path})
    except FileNotFoundError as error:
        raise TemplateError("npx not found: install Node.js and run `make setup`") from error
    except subprocess.TimeoutExpired as error:
        raise TemplateError(f"cdk synth did not finish in {SYNTH_TIMEOUT_S} s") from error
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise TemplateError(f"cdk synth failed (exit {done.returncode}):\n{tail}")
    return training_template(outdir)


def training_template(outdir: Path) -> Path:
    """The training stack's template in a cdk.out: the one with a state machine (a Valkey
    plan also synthesizes FasdlCacheStack, the cache alone)."""
    templates = sorted(outdir.glob("*.template.json"))
    training = [path for path in templates
                if '"AWS::StepFunctions::StateMachine"' in path.read_text()]
    if len(training) != 1:
        raise TemplateError(f"expected one training stack template (with a state machine) in "
                            f"{outdir}, found {len(training)} of {len(templates)} templates")
    return training[0]


@dataclass(frozen=True)
class FunctionResource:
    logical_id: str
    handler: str
    timeout_s: int
    memory_mb: int
    environment: dict[str, Any]  # values are strings or unresolved CloudFormation tokens
    code_dir: Path
    runtime: str
    reserved_concurrency: int | None = None  # ReservedConcurrentExecutions
    layer_python: tuple[Path, ...] = ()  # the user-code layer's python/ (Lambda's /opt/python)


@dataclass(frozen=True)
class LocalTemplate:
    path: Path
    region: str
    state_machine_name: str
    definition: dict[str, Any]
    functions: dict[str, FunctionResource]

    def function_specs(self, bindings: Mapping[str, str],
                       overrides: Mapping[str, str | None] | None = None
                       ) -> dict[str, FunctionSpec]:
        """Specs with every tokenized environment variable bound by name in ``bindings``
        (e.g. ``FASDL_RESULTS_BUCKET``); ``overrides`` replace, add or (None) drop variables."""
        specs: dict[str, FunctionSpec] = {}
        for logical_id, resource in self.functions.items():
            env: dict[str, str] = {}
            for name, value in resource.environment.items():
                if isinstance(value, str):
                    env[name] = value
                elif name in bindings:
                    env[name] = bindings[name]
                else:
                    raise TemplateError(
                        f"{logical_id}: environment variable {name} is {json.dumps(value)}, "
                        "which has no local binding (add it in local/run/runner.py)")
            for name, override in (overrides or {}).items():
                if override is None:
                    env.pop(name, None)
                else:
                    env[name] = override
            specs[logical_id] = FunctionSpec(
                name=logical_id, handler=resource.handler, code_dir=resource.code_dir,
                timeout_s=resource.timeout_s, memory_mb=resource.memory_mb, environment=env,
                runtime=resource.runtime, python_path=resource.layer_python)
        return specs

    def function_named(self, handler_module: str) -> str:
        """The logical id of the function whose handler lives in ``handler_module``."""
        found = [f.logical_id for f in self.functions.values()
                 if f.handler.rpartition(".")[0] == handler_module]
        if len(found) != 1:
            raise TemplateError(f"expected one function with handler {handler_module}.*, "
                                f"found {found}")
        return found[0]


def _resolve(token: Any, region: str) -> str:
    if isinstance(token, str):
        return token
    ref = token.get("Ref") if isinstance(token, dict) else None
    pseudo = {"AWS::Partition": "aws", "AWS::AccountId": ACCOUNT, "AWS::Region": region,
              "AWS::URLSuffix": "amazonaws.com"}
    if ref in pseudo:
        return pseudo[ref]
    get_att = token.get("Fn::GetAtt") if isinstance(token, dict) else None
    if isinstance(get_att, list) and len(get_att) == 2 and get_att[1] == "Arn":
        return function_arn(str(get_att[0]), region)
    raise TemplateError(f"cannot resolve {json.dumps(token)} in the state machine definition")


def _definition(resource: dict[str, Any], region: str) -> dict[str, Any]:
    text = resource["Properties"]["DefinitionString"]
    if isinstance(text, dict):
        separator, parts = text["Fn::Join"]
        text = separator.join(_resolve(part, region) for part in parts)
    definition: dict[str, Any] = json.loads(text)
    return definition


def _environment(props: dict[str, Any], resources: dict[str, Any]) -> dict[str, Any]:
    """The function's variables; a ``Ref`` to a function (its name, e.g. the trigger's
    FASDL_WORKER_FUNCTION) becomes that function's logical id, its name in the emulator."""
    variables = dict(props.get("Environment", {}).get("Variables", {}))
    for name, value in variables.items():
        ref = value.get("Ref") if isinstance(value, dict) else None
        if ref in resources and resources[ref]["Type"] == "AWS::Lambda::Function":
            variables[name] = ref
    return variables


def _code_dir(outdir: Path, code: dict[str, Any]) -> Path:
    # Zip assets are staged as <outdir>/asset.<hash>/ and referenced as <hash>.zip.
    key = str(code.get("S3Key", ""))
    staged = outdir / f"asset.{key.removesuffix('.zip')}"
    if not key.endswith(".zip") or not staged.is_dir():
        raise TemplateError(f"function code {json.dumps(code)} is not a staged zip asset in "
                            f"{outdir} (container-image packaging cannot run locally)")
    return staged


def _user_code_layers(outdir: Path, props: dict[str, Any], resources: dict[str, Any]
                      ) -> tuple[Path, ...]:
    """The staged ``python/`` folders of the function's user-code and requirements layers
    (infra/user_code.py): Lambda puts a layer's python/ on sys.path; the torch layer is the
    local venv's torch."""
    found: list[Path] = []
    for layer in props.get("Layers", []):
        logical_id = layer.get("Ref") if isinstance(layer, dict) else None
        if not logical_id or not any(own in logical_id for own in OWN_LAYER_IDS):
            continue
        asset = resources[logical_id].get("Metadata", {}).get("aws:asset:path")
        if not asset or not (outdir / str(asset) / "python").is_dir():
            raise TemplateError(f"layer {logical_id} has no staged python/ folder in {outdir}")
        found.append(outdir / str(asset) / "python")
    return tuple(found)


def load_template(path: Path, *, region: str,
                  state_machine: str | None = None) -> LocalTemplate:
    """The template's only state machine, or (a stack with several, e.g. profiling on) the one
    whose StateMachineName ends with ``state_machine`` (``"-profiling"``)."""
    try:
        template = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise TemplateError(f"cannot read template {path}: {error}") from error
    resources: dict[str, Any] = template.get("Resources", {})
    machines = [r for r in resources.values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    if state_machine is not None:
        machines = [r for r in machines if str(r["Properties"].get("StateMachineName", ""))
                    .endswith(state_machine)]
    if len(machines) != 1:
        named = f" named *{state_machine}" if state_machine is not None else ""
        raise TemplateError(f"{path}: expected one state machine{named}, found {len(machines)}")
    definition = _definition(machines[0], region)
    functions: dict[str, FunctionResource] = {}
    for logical_id, resource in resources.items():
        # Only what the state machine invokes (not the profiler, not CDK helper functions).
        if resource["Type"] != "AWS::Lambda::Function" or \
                function_arn(logical_id, region) not in json.dumps(definition):
            continue
        props = resource["Properties"]
        functions[logical_id] = FunctionResource(
            logical_id=logical_id, handler=props["Handler"],
            timeout_s=int(props.get("Timeout", 3)), memory_mb=int(props.get("MemorySize", 128)),
            environment=_environment(props, resources),
            code_dir=_code_dir(path.parent, props.get("Code", {})),
            runtime=str(props.get("Runtime", "")),
            reserved_concurrency=props.get("ReservedConcurrentExecutions"),
            layer_python=_user_code_layers(path.parent, props, resources))
    return LocalTemplate(path=path, region=region,
                         state_machine_name=str(machines[0]["Properties"]["StateMachineName"]),
                         definition=definition, functions=functions)


def local_server_env(s3: SeaweedS3Server, cache: ValkeyServer | RedisTlsClusterServer | None,
                     cache_dir: Path, lambda_endpoint: str | None = None,
                     elasticache_endpoint: str | None = None
                     ) -> tuple[dict[str, str | None], str]:
    """The environment overrides that point every emulated function at the local servers
    instead of AWS (None drops a variable), and a line saying which servers those are.
    ``lambda_endpoint``: the Lambda control plane (local/aws/control_plane.py) for the trigger;
    ``elasticache_endpoint``: local/aws/cache_plane.py, where the trigger looks the cache up as on
    AWS (its address then reaches the others in the run state only); without it the cache's
    address is fixed in every function's environment (profiler runs)."""
    env: dict[str, str | None] = {
        WORKER_LOG_GROUP_ENV: LOCAL_WORKER_LOG_GROUP,  # local/aws/logs_plane.py serves it
        "AWS_ENDPOINT_URL_LAMBDA": lambda_endpoint,
        "AWS_ENDPOINT_URL_ELASTICACHE": elasticache_endpoint,
        "AWS_ENDPOINT_URL_S3": s3.endpoint_url, "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_EC2_METADATA_DISABLED": "true",
        **Settings.to_env(s3_path_style=True, cache_dir=str(cache_dir)),
        STUB_ENV: None,  # torch comes from this venv
    }
    servers = f"SeaweedFS S3 at {s3.endpoint_url}"
    if cache is not None:
        env.update(Settings.to_env(cache_tls=cache.tls, cache_cluster=True))
        env[ENV_NAMES["cache_ca_certs"]] = cache.ca_cert  # None: no CA bundle
        if elasticache_endpoint is None:
            env.update(Settings.to_env(cache_endpoint=HOST, cache_port=cache.port))
        servers += f", {cache.name} at {HOST}:{cache.port}"
    return env, servers
