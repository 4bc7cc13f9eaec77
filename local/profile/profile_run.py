"""The measuring half of ``python -m local profile`` (local/profile/profile_command.py): template,
servers, one emulated profiler invocation per memory, ``collect``, ``samples.jsonl``."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasdl.contract.plan import Plan
from local.aws.template import (
    REPO_ROOT,
    LocalTemplate,
    TemplateError,
    load_template,
    local_server_env,
    synthesize,
)
from local.lambda_.emulator import LambdaEmulator
from local.lambda_.invocation import FunctionSpec
from local.profile.profile_fit import ProfileRunError
from local.run.run_servers import storage_servers
from local.servers.layout import BUCKETS

if TYPE_CHECKING:
    from local.lambda_.lambda_speed import LambdaEmulation

Say = Callable[[str], None]
MB_PER_VCPU = 1769  # Lambda gives one vCPU per 1769 MB
PROFILER_HANDLER = "handlers.profiler.handler"
DEFAULT_PLAN = REPO_ROOT / "infra" / "default_plan.json"
# State names of infra/profiling_workflow.py (not imported: it pulls in aws_cdk).
MACHINE_SUFFIX, MAP_STATE, COLLECT_STATE = "-profiling", "Profile each memory", "Collect samples"


class CdkOutError(TemplateError):
    """A reused ``--cdk-out`` that cannot serve this profile (bad input: exit 2)."""


@dataclass(frozen=True)
class Measured:
    samples: Path
    invocations: list[dict[str, Any]]


def template_path(cdk_out: Path) -> Path:
    found = sorted(cdk_out.glob("*.template.json"))
    if len(found) != 1:
        raise CdkOutError(f"{cdk_out}: expected one *.template.json, found {len(found)}")
    return found[0]


def prepare_template(options: ProfileOptions, work: Path, say: Say) -> LocalTemplate:
    """The profiling state machine and its functions: synthesized with ``-c profiling=true``
    and exactly the asked memories, or read from ``--cdk-out``."""
    plan = Plan.load(DEFAULT_PLAN)
    if options.cdk_out is not None:
        path = template_path(options.cdk_out)
    else:
        plan = plan.on_channel(options.channel)  # the profilers' FASDL_CHANNEL
        plan.save(work / "plan.json")
        began = time.monotonic()
        memories = ",".join(str(m) for m in sorted(set(options.memories)))
        context = {"profiling": "true", "profile_memories": memories}
        if options.workload is not None:  # as on AWS: its code and packages ship as layers
            context["workload"] = str(options.workload.resolve())
        path = synthesize(work / "plan.json", work / "cdk.out", context=context)
        say(f"synthesized {path.name} with -c profiling=true -c profile_memories={memories} "
            f"in {time.monotonic() - began:.1f} s")
    try:
        template = load_template(path, region=plan.deployment.region,
                                 state_machine=MACHINE_SUFFIX)
    except TemplateError as error:
        if options.cdk_out is not None:
            raise CdkOutError(f"{error} (synthesize with -c profiling=true)") from error
        raise
    channels = {str(f.environment.get("FASDL_CHANNEL")) for f in template.functions.values()}
    if channels != {options.channel}:  # a valkey profiler needs a valkey stack's settings
        raise CdkOutError(f"the template's profilers use the {'/'.join(sorted(channels))} "
                          f"channel, not --channel {options.channel}")
    return template


def _function_of(state: dict[str, Any]) -> str:
    return str(state.get("Resource", "")).split(":function:", 1)[-1].split(":", 1)[0]


def routed_specs(template: LocalTemplate, specs: dict[str, FunctionSpec],
                 memories: tuple[int, ...]) -> tuple[dict[int, FunctionSpec], FunctionSpec]:
    """Memory → the spec the state machine routes it to, and the collector's spec. A memory
    without its own function (a reused ``--cdk-out``) gets a copy at that memory."""
    states = template.definition["States"]
    routes = states[MAP_STATE]["ItemProcessor"]["States"]
    collector = specs[_function_of(states[COLLECT_STATE])]
    chosen: dict[int, FunctionSpec] = {}
    for memory in sorted(set(memories)):
        state = routes.get(f"Profile at {memory} MB")
        spec = specs[_function_of(state)] if state else replace(
            collector, name=f"{collector.name}At{memory}", memory_mb=memory)
        if spec.handler != PROFILER_HANDLER or spec.memory_mb != memory:
            raise TemplateError(f"{spec.name}: expected {PROFILER_HANDLER} at {memory} MB, "
                                f"found {spec.handler} at {spec.memory_mb} MB")
        chosen[memory] = spec
    return chosen, collector


def threads_for(memory_mb: int, fixed: int | None, emulation: LambdaEmulation | None) -> int:
    """The vCPUs Lambda shows the function, ceil(M/1769), or ``--threads``; under emulation
    never more than those vCPUs (the emulator caps them too)."""
    if emulation is not None:
        return min(fixed or emulation.threads(memory_mb), emulation.threads(memory_mb))
    return fixed or max(1, math.ceil(memory_mb / MB_PER_VCPU))


def emulation_text(emulation: LambdaEmulation | None) -> str:
    if emulation is None:
        return "no Lambda emulation (this machine's CPU and loopback network, unshaped)"
    return ", ".join([
        "CPU capped at M/1769 vCPU" if emulation.cpu else "CPU not capped",
        f"channel shaped like {emulation.platform.name}" if emulation.platform is not None
        else "channel not shaped"])


def emulation_summary(emulation: LambdaEmulation | None) -> dict[str, Any] | None:
    if emulation is None:
        return None
    return {"cpu": emulation.cpu,
            "platform": None if emulation.platform is None else emulation.platform.name}


def _shapes(config: dict[str, Any]) -> str:
    """What the profiler feeds the model: a dataset's shapes, or the workload's input shape."""
    if "dataset" in config:
        return f"{config['dataset']} shapes"
    return f"inputs of {config['input_shape']}, {config['num_classes']} classes"


def measure(options: ProfileOptions, template: LocalTemplate, *, config: dict[str, Any],
            emulation: LambdaEmulation | None, timeout_s: float | None, out: Path, work: Path,
            say: Say) -> Measured:
    """Servers up, each memory in turn, collect, download ``samples.jsonl``, servers down."""
    memories = tuple(config["memories"])
    with ExitStack() as stack:
        s3, cache = storage_servers(stack, channel=options.channel)
        local_env, servers = local_server_env(s3, cache, work / "lambda-tmp")
        say(f"started {servers}; {emulation_text(emulation)}")
        bindings = {k: v for k, v in {**BUCKETS, **local_env}.items() if v is not None}
        routed, collector = routed_specs(template, template.function_specs(bindings, local_env),
                                         memories)
        invocations = []
        for index, memory in enumerate(memories, 1):
            spec = routed[memory]
            if timeout_s is not None:
                spec = replace(spec, timeout_s=timeout_s)
            threads = threads_for(memory, options.threads, emulation)
            say(f"[{index}/{len(memories)}] {memory} MB ({spec.name}, {threads} thread(s)"
                f"{_cpu_cap(emulation, memory)}): {config['model']} on {_shapes(config)} "
                f"at B={_joined(config['batches'])}, {options.warmup}+{options.repeats} "
                f"iterations each; {options.channel} put/get of {_joined(config['sizes_mb'])} "
                f"MB x{options.transfer_repeats}")
            # One emulator per memory: its thread count and CPU share follow M.
            with LambdaEmulator({spec.name: spec}, region=template.region, threads=threads,
                                log_dir=out / "logs", emulation=emulation) as emulator:
                result, seconds, log = _invoke(emulator, spec, {
                    "action": "profile", "memory_mb": memory, "config": config})
            per_batch = ", ".join(f"B={b} {s * 1000:.1f} ms"
                                  for b, s in result["seconds_per_batch"].items())
            say(f"      done in {seconds:.1f} s: {per_batch}; peak {result['peak_mb']:.0f} MB; "
                f"{result['records']} samples")
            invocations.append({"memory_mb": memory, "function": spec.name, "threads": threads,
                                "seconds": round(seconds, 3), "records": result["records"],
                                "peak_mb": result["peak_mb"],
                                "seconds_per_batch": result["seconds_per_batch"],
                                "log": str(log)})
        with LambdaEmulator({collector.name: collector}, region=template.region,
                            log_dir=out / "logs") as emulator:
            collected, _, _ = _invoke(emulator, collector, {
                "action": "collect", "profile_id": config["profile_id"],
                "memories": list(memories)})
        samples = out / "samples.jsonl"
        s3.client().download_file(collected["bucket"], collected["samples_key"], str(samples))
        say(f"collected {collected['lines']} samples into {samples}")
    say("stopped the local servers")
    return Measured(samples=samples, invocations=invocations)


def _cpu_cap(emulation: LambdaEmulation | None, memory: int) -> str:
    if emulation is None or not emulation.cpu:
        return ""
    return f", capped at {emulation.cpu_share(memory):.2f} vCPU"


def _invoke(emulator: LambdaEmulator, spec: FunctionSpec,
            event: dict[str, Any]) -> tuple[dict[str, Any], float, Path | None]:
    invocation = emulator.invoke(spec.name, event)
    payload: dict[str, Any] = json.loads(invocation.payload)
    if invocation.function_error:
        raise ProfileRunError(
            f"{spec.name} ({event['action']} at {spec.memory_mb} MB) failed after "
            f"{invocation.duration_s:.1f} s: {payload.get('errorType')}: "
            f"{payload.get('errorMessage')} (log: {invocation.log_path})")
    return payload, invocation.duration_s, invocation.log_path


def _joined(values: list[Any]) -> str:
    return ",".join(f"{v:g}" for v in values)


DEFAULT_MEMORIES: tuple[int, ...] = (512, 1024, 1769)
DEFAULT_BATCHES: tuple[int, ...] = (8, 16, 32, 64)
DEFAULT_SIZES_MB: tuple[float, ...] = (0.0625, 0.5, 1.0, 2.0, 4.0, 8.0)


@dataclass(frozen=True)
class ProfileOptions:
    """What to profile; the defaults are the CLI's."""

    memories: tuple[int, ...] = DEFAULT_MEMORIES
    channel: str = "s3"
    model: str = "cnn"
    dataset: str = "digits"
    batches: tuple[int, ...] = DEFAULT_BATCHES
    sizes_mb: tuple[float, ...] = DEFAULT_SIZES_MB
    warmup: int = 2
    repeats: int = 5
    transfer_repeats: int = 3
    name: str | None = None  # default local-<model>-<dataset>
    out: Path | None = None  # default profiles/local-<channel>
    threads: int | None = None  # default per memory: ceil(M/1769), Lambda's vCPUs
    cdk_out: Path | None = None
    emulate: str | None = "default"  # a platform for load_emulation; None: no emulation
    timeout_s: float | None = None  # per invocation; default the function's Timeout
    profile_id: str | None = None  # default local-<time>
    workload: Path | None = None  # a workload file to profile (replaces model and dataset)
    accept_failed_fit: bool = False  # a fit below the gates: exit 0 and a plan command
