"""``python -m local run``: the synthesized state machine, end to end, on this machine.

1. plan a small job with the planner (cnn-digits, W=4) or read ``--plan``; print it;
2. ``npx cdk synth`` that plan (or reuse ``--cdk-out``) and read the template;
3. start the servers on free loopback ports (local/run_servers.py); upload the dataset;
4. run the definition in moto's ASL interpreter, every Lambda call in its own emulated
   invocation (local/adapter.py, local/emulator.py), printing each finished segment;
5. print the summary and write the report folder; stop everything (also on Ctrl-C, after
   writing a partial report with status ``INTERRUPTED``).

Fault injection for tests and demos: ``inject_env`` adds variables to one function's
environment (e.g. the worker's ``FASDL_TEST_CRASH_AT_ITERATION``, fasdl.run.fault_hooks);
``restart_cache_at`` restarts the Valkey server once the workers exchange shards of iteration
N (its keys are lost, like a cache node replaced mid-run); ``inject_service_errors`` makes the
first N invocations of a function fail with a Lambda service error, nothing run
(local/service_faults.py); ``account`` and ``cache_stack``: what the trigger's AWS calls see
(control_plane.py, cache_plane.py). Every invocation is held to its memory size unless
``memory_limit`` is off (``oom_error`` names the kill); report.json records peaks and errors.

Bad input (corrupt plan, W mismatch, missing dataset, plan for another stack) raises
:class:`InputError` before any server or worker starts: exit code 2.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fasdl.contract.plan import Plan, PlanError
from infra.lambda_errors import OUT_OF_MEMORY
from local.adapter import LocalStepFunctions, emulator_router
from local.cache_plane import CacheStackState
from local.chaos_faults import StorageFaults, with_storage_faults
from local.control_plane import AccountOptions, WorkerFunction
from local.emulator import FunctionSpec, LambdaEmulator
from local.faults import ROLES, InputError, restarting
from local.jobs import local_job, missing_dataset_hint
from local.lambda_speed import EmulationError, LambdaEmulation, load_emulation
from local.layout import BUCKETS
from local.reference import single_process_reference
from local.report import Progress
from local.run_limits import with_limits
from local.run_report import FinishedRun, wait_and_report
from local.run_servers import RunServers, cache_report, cap_planned_cache, start_servers
from local.service_faults import ServiceFault
from local.template import (
    LocalTemplate,
    TemplateError,
    load_template,
    synthesize,
    training_template,
)

DEFAULT_WORKLOAD = "cnn-digits"
DEFAULT_WORKERS = 4  # a planned job of a workload local.jobs does not list
DEFAULT_EPOCHS = 10
DEFAULT_SEGMENTS = 10  # at most: enough to show the loop and resumes, few enough to be quick
WORKER_HANDLER = "handlers.worker"
Say = Callable[[str], None]


@dataclass(frozen=True)
class RunOptions:
    plan: Path | None = None
    channel: str | None = None  # default: the plan's, or s3 when planning
    epochs: int | None = None
    workers: int | None = None
    timeout_s: float = 900.0  # the whole run, wall clock
    workers_timeout_s: float | None = None  # kill workers sooner than the synthesized Timeout
    report_dir: Path | None = None
    dataset_dir: Path | None = None  # x.npy, y.npy, test/{x,y}.npy; default: built digits
    cdk_out: Path | None = None  # an existing synth of the same plan
    segment_iterations: int | None = None  # planned job default: whole_epoch_segments
    workload: str = DEFAULT_WORKLOAD  # what a planned job plans (a shipped workload name)
    threads: int | None = 1  # CPU threads per invocation (torch/OpenMP)
    tls_cache: bool = False  # valkey channel: redis-server 7 with TLS instead of valkey-server
    run_id: str | None = None
    inject_env: tuple[tuple[str, str, str], ...] = ()  # (role, key, value)
    restart_cache_at: int | None = None  # valkey: restart it once iteration N's shards appear
    cache_at_peak: bool = False  # valkey: cap at the planned peak, not the GB it rounds up to
    emulate_lambda: str | None = None  # Lambda CPU + bandwidth: "default", a profile name/path
    memory_limit: bool = True  # kill an invocation past its memory size, as Lambda does
    oom_error: str = OUT_OF_MEMORY  # how such a kill is reported (or Runtime.ExitError)
    # Reuse an idle sandbox this long (0: every start cold, the default for now: a warm worker
    # after a handler error was seen at twice its real memory, not yet understood)
    warm_idle_s: float = 0.0
    inject_service_errors: tuple[ServiceFault, ...] = ()  # function = role (worker...)
    account: AccountOptions = field(default_factory=AccountOptions)  # control_plane.py
    cache_stack: CacheStackState = field(default_factory=CacheStackState)  # cache_plane.py
    storage_faults: StorageFaults = field(default_factory=StorageFaults)  # chaos_faults.py
    reference: bool = False  # train the single-process reference first and plot it
    budget_usd: float | None = None  # instead of the plan's limits (local/run_limits.py)
    deadline_s: float | None = None


# ---- plan -------------------------------------------------------------------------------------
def _planned_defaults(options: RunOptions) -> tuple[int, int]:
    """(epochs, workers) of a planned job: the options', else the shipped local job's."""
    job = local_job(options.workload)
    return (options.epochs or (job.epochs if job else DEFAULT_EPOCHS),
            options.workers or (job.workers if job else DEFAULT_WORKERS))


def _planner_plan(options: RunOptions, out: Path, say: Say) -> dict[str, Any]:
    epochs, workers = _planned_defaults(options)
    command = [sys.executable, "-m", "planner", "plan", "--workload", options.workload,
               "--deadline", "900", "--max-global-batch", "64", "--epochs", str(epochs),
               "--min-workers", str(workers),
               "--channel", options.channel or "s3", "--timeout", "300", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise InputError(f"the planner failed:\n{done.stderr.strip() or done.stdout.strip()}")
    say(done.stdout.rstrip())
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def prepare_plan(options: RunOptions, work: Path, say: Say) -> Plan:
    """The plan to run, with the options applied and validated (PlanError → exit 2)."""
    if options.plan is not None:
        try:
            data = json.loads(options.plan.read_text())
        except (OSError, ValueError) as error:
            raise InputError(f"cannot read plan {options.plan}: {error}") from error
        if not isinstance(data, dict):
            raise InputError(f"plan {options.plan}: expected a JSON object")
        Plan.from_dict(data)  # a corrupt plan fails here, before any override hides it
    else:
        data = _planner_plan(options, work / "planned.json", say)
    deployment, training = data.get("deployment", {}), data.get("training", {})
    wanted = options.workers or (None if options.plan else _planned_defaults(options)[1])
    if wanted is not None and deployment.get("workers") != wanted:
        raise InputError(f"W mismatch: the plan has deployment.workers="
                         f"{deployment.get('workers')} but W={wanted} was asked for")
    if options.epochs:
        training["epochs"] = options.epochs
    if options.segment_iterations:
        training["segment_iterations"] = options.segment_iterations
    plan = Plan.from_dict(data)
    return plan.on_channel(options.channel) if options.channel else plan


def whole_epoch_segments(plan: Plan) -> Plan:
    """Segments of whole epochs, at most :data:`DEFAULT_SEGMENTS` (one per epoch for short
    jobs): the loop, the checkpoints and the progress all show."""
    data = plan.to_dict()
    epochs_per_segment = -(-plan.training.epochs // DEFAULT_SEGMENTS)
    data["training"]["segment_iterations"] = max(1, plan.iterations_per_epoch) * \
        epochs_per_segment
    return Plan.from_dict(data)


# ---- dataset ----------------------------------------------------------------------------------
def prepare_dataset(plan: Plan, options: RunOptions, work: Path,
                    say: Say) -> tuple[Plan, dict[str, Path]]:
    """Object key suffix → local file (``"x.npy"``, ``"test/y.npy"``...), and the plan; a
    planned job's sample count is fitted to the train split."""
    root = options.dataset_dir
    if root is None:
        job = local_job(plan.workload.name, plan.workload.dataset)
        if job is None:
            raise InputError(f"missing dataset: workload {plan.workload.name!r} "
                             f"({plan.workload.dataset}) has no dataset built here; "
                             f"{missing_dataset_hint()}")
        say(f"building the {plan.workload.name} dataset")
        root = job.build_dataset(work / "dataset")
    base = root / "train" if (root / "train" / "x.npy").is_file() else root
    files = {"x.npy": base / "x.npy", "y.npy": base / "y.npy",
             "test/x.npy": root / "test" / "x.npy", "test/y.npy": root / "test" / "y.npy"}
    for name in ("x.npy", "y.npy"):
        if not files[name].is_file():
            raise InputError(f"missing dataset: {files[name]} not found")
    files = {name: path for name, path in files.items() if path.is_file()}
    files.update(_initial_weights(plan, root, base))
    try:
        rows = [np.load(files[n], mmap_mode="r", allow_pickle=False).shape[0]
                for n in ("x.npy", "y.npy")]
    except (OSError, ValueError) as error:
        raise InputError(f"unreadable dataset in {base}: {error}") from error
    if options.plan is None and rows[0] == rows[1] < plan.workload.samples:
        # cnn-digits' profile counts all 1797 digits; training uses the train split.
        say(f"note: the train split holds {rows[0]} rows; the plan's workload.samples "
            f"{plan.workload.samples} is set to {rows[0]}")
        data = plan.to_dict()
        data["workload"]["samples"] = rows[0]
        plan = Plan.from_dict(data)
    if rows[0] != rows[1] or rows[0] < plan.workload.samples:
        raise InputError(f"dataset {base}: x has {rows[0]} rows, y {rows[1]}; the plan trains "
                         f"on workload.samples={plan.workload.samples}")
    return plan, files


def _initial_weights(plan: Plan, root: Path, base: Path) -> dict[str, Path]:
    """The plan's initial weights, uploaded with the dataset as on AWS (``aws s3 sync`` of the
    train folder): a key under the dataset's prefix, the file in the train folder."""
    key = plan.workload.initial_weights
    if key is None:
        return {}
    prefix = plan.workload.dataset.rstrip("/") + "/"
    if not key.startswith(prefix):
        raise InputError(f"workload.initial_weights: {key} must be under the dataset's prefix "
                         f"{prefix} for a local run (put the file in the train folder)")
    name = key.removeprefix(prefix)
    found = [folder / name for folder in (base, root) if (folder / name).is_file()]
    if not found:
        raise InputError(f"workload.initial_weights: {name} not found in {base}")
    return {name: found[0]}


# ---- template ---------------------------------------------------------------------------------
def prepare_template(plan: Plan, plan_path: Path, options: RunOptions, work: Path,
                     say: Say) -> LocalTemplate:
    if options.cdk_out is not None:
        try:
            path = training_template(options.cdk_out)
        except TemplateError as error:
            raise InputError(f"--cdk-out: {error}") from error
    else:
        began = time.monotonic()
        path = synthesize(plan_path, work / "cdk.out")
        say(f"synthesized {path.name} with `npx cdk synth` in {time.monotonic() - began:.1f} s")
    template = load_template(path, region=plan.deployment.region)
    trigger = template.functions[template.function_named("handlers.trigger")]
    deployed = trigger.environment.get("FASDL_DEPLOYMENT")
    if deployed != plan.deployment_fingerprint():
        raise InputError(f"the plan is for another stack: its deployment is "
                         f"{plan.deployment_fingerprint()}, the template's {deployed}")
    train = template.definition["States"].get("Train segment", {})
    if train.get("MaxConcurrency") != plan.deployment.workers:
        raise InputError(f"W mismatch: the state machine runs {train.get('MaxConcurrency')} "
                         f"workers at once, the plan has W={plan.deployment.workers}")
    return template


def plan_text(plan: Plan) -> str:
    d, t, p = plan.deployment, plan.training, plan.prediction
    lines = [f"Configuration: {plan.workload.name} ({plan.workload.model} on "
             f"{plan.workload.dataset}, {plan.workload.samples} samples), {d.channel} channel",
             f"  W={d.workers} M={d.memory_mb} MB K={t.aggregators} B^a={t.batch_aggregator} "
             f"B^n={t.batch_non_aggregator} sync={t.sync}, {t.epochs} epochs = "
             f"{plan.total_iterations} iterations in {plan.segments} segment(s) of "
             f"<= {t.segment_iterations}, Lambda timeout {d.timeout_s} s"]
    if p is not None:
        lines.append(f"  predicted on AWS Lambda: {p.time_s:.1f} s, ${p.cost_usd:.4f}")
    return "\n".join(lines)


# ---- run --------------------------------------------------------------------------------------
def run(options: RunOptions, say: Say = print) -> int:
    work = Path(tempfile.mkdtemp(prefix="fasdl-local-"))
    try:
        try:
            plan = prepare_plan(options, work, say)
            emulation = None if options.emulate_lambda is None else load_emulation(
                options.emulate_lambda, channel=plan.deployment.channel)
            if options.restart_cache_at is not None and plan.deployment.channel != "valkey":
                raise InputError("--restart-cache-at needs the valkey channel")
            plan, files = prepare_dataset(plan, options, work, say)
            if options.plan is None and not options.segment_iterations:
                plan = whole_epoch_segments(plan)
            plan = with_limits(plan, budget_usd=options.budget_usd,
                               deadline_s=options.deadline_s)
            plan_path = work / "plan.json"
            plan.save(plan_path)
            say(plan_text(plan))
            template = prepare_template(plan, plan_path, options, work, say)
            worker = WorkerFunction.of(template, options.account, WORKER_HANDLER)
            curve = single_process_reference(plan, files, say) if options.reference else None
        except (InputError, PlanError, EmulationError) as error:
            print(f"fasdl local: {error}", file=sys.stderr)
            return 2
        except TemplateError as error:
            print(f"fasdl local: {error}", file=sys.stderr)
            return 1
        return _execute(plan, files, template, options, work, say, worker, emulation,
                        reference=curve)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _execute(plan: Plan, files: dict[str, Path], template: LocalTemplate, options: RunOptions,
             work: Path, say: Say, worker: WorkerFunction,
             emulation: LambdaEmulation | None = None, *,
             reference: list[dict[str, Any]] | None = None) -> int:
    run_id = options.run_id or time.strftime("local-%Y%m%d-%H%M%S", time.gmtime())
    report_dir = options.report_dir or Path("reports") / run_id
    channel = plan.deployment.channel
    # moto's interpreter logs every failed state with its whole parse tree (also from threads
    # still unwinding after Ctrl-C); failures are in the history and the report instead.
    logging.getLogger("moto.stepfunctions.parser").setLevel(logging.CRITICAL)
    with ExitStack() as stack:
        servers = start_servers(
            stack, template, channel=channel, tls_cache=options.tls_cache,
            worker=worker, region=plan.deployment.region, cache_stack=options.cache_stack,
            lambda_tmp=work / "lambda-tmp")
        s3, cache, local_env = servers.s3, servers.cache, servers.env
        say(f"started {servers.description}")
        if cache is not None:
            say(cap_planned_cache(stack, servers, plan, at_peak=options.cache_at_peak))
        client = s3.client()
        prefix = plan.workload.dataset.rstrip("/")
        for name, path in files.items():
            client.upload_file(str(path), BUCKETS["FASDL_DATASETS_BUCKET"], f"{prefix}/{name}")
        say(f"uploaded the dataset to s3://{BUCKETS['FASDL_DATASETS_BUCKET']}/{prefix}/")

        bindings = {k: v for k, v in {**BUCKETS, **local_env}.items() if v is not None}
        specs = template.function_specs(bindings, local_env)
        worker_function = template.function_named(WORKER_HANDLER)
        roles = {template.function_named(f"handlers.{role}"): role for role in ROLES}
        emulator = _emulator(specs, roles, plan, options, report_dir, emulation, say, servers)
        stack.callback(emulator.cleanup)
        sfn = stack.enter_context(LocalStepFunctions(emulator_router(emulator.invoke),
                                                     region=plan.deployment.region))
        machine = sfn.create(template.state_machine_name, template.definition)
        progress = Progress(client, BUCKETS["FASDL_RESULTS_BUCKET"], run_id,
                            plan.deployment.workers, plan.segments, say)
        say(f"running {template.state_machine_name} as execution {run_id} "
            f"(logs: {report_dir / 'logs'})")
        started = time.monotonic()
        run_input: dict[str, Any] = {"run_id": run_id}
        if options.cdk_out is not None:  # the stack's deployed plan may differ in training
            run_input["plan"] = plan.to_dict()
        sfn.start(machine, run_id, run_input)
        on_poll = _every(2.0, progress.poll)
        if options.restart_cache_at is not None and cache is not None:
            on_poll = restarting(on_poll, cache, run_id, options.restart_cache_at, say)
        on_poll = with_storage_faults(on_poll, options.storage_faults, run_id=run_id, s3=s3,
                                      s3_client=client, cache=cache, say=say)
        finished = FinishedRun(
            plan, run_id, report_dir, client, BUCKETS["FASDL_RESULTS_BUCKET"], emulator,
            progress, roles, worker_function, cache, options.memory_limit, started, reference)
        status = wait_and_report(finished, sfn, machine, timeout_s=options.timeout_s,
                                 on_poll=on_poll, say=say)
        for line in cache_report(servers):
            say(line)
    say("stopped all local servers and invocations")
    return 0 if status == "SUCCEEDED" else 1


def _emulator(specs: dict[str, FunctionSpec], roles: dict[str, str], plan: Plan,
              options: RunOptions, report_dir: Path, emulation: LambdaEmulation | None,
              say: Say, servers: RunServers) -> LambdaEmulator:
    """The emulator of the run: the template's functions with the options' changes and faults,
    refusing and answering invocations as the control plane says; its finished invocations
    are the worker log group's REPORT lines."""
    control = servers.control
    names = {role: name for name, role in roles.items()}
    if options.workers_timeout_s:
        specs[names["worker"]] = replace(specs[names["worker"]],
                                         timeout_s=options.workers_timeout_s)
    for role, key, value in options.inject_env:
        name = names[role]
        specs[name] = replace(specs[name], environment={**specs[name].environment, key: value})
        say(f"injected {key}={value} into the {role} function's environment")
    if not options.memory_limit:
        say("memory limit off: invocations may use more than their memory size "
            "(their peak RSS is still measured)")
    emulator = LambdaEmulator(specs, region=plan.deployment.region, threads=options.threads,
                              log_dir=report_dir / "logs", emulation=emulation,
                              memory_limit=options.memory_limit,
                              service_faults=_service_faults(options, roles, say),
                              gate=control.worker.refusal, oom_error=options.oom_error,
                              warm_idle_s=options.warm_idle_s)
    control.route_invocations(emulator.invoke)
    servers.logs.read_from(lambda: list(emulator.invocations))
    if emulation is not None:
        say(emulation.describe(specs[names["worker"]].memory_mb, plan.deployment.workers))
    return emulator


def _service_faults(options: RunOptions, roles: dict[str, str],
                    say: Say) -> list[ServiceFault]:
    """The options' faults (by role) for the emulator (by function name)."""
    names = {role: name for name, role in roles.items()}
    for fault in options.inject_service_errors:
        say(f"injecting {fault.kind.name}: the next {fault.count} {fault.function} "
            "invocation(s) fail without running")
    return [ServiceFault(names[fault.function], fault.kind, fault.count)
            for fault in options.inject_service_errors]


def _every(seconds: float, action: Callable[[], None]) -> Callable[[], None]:
    last = [0.0]

    def maybe() -> None:
        if time.monotonic() - last[0] >= seconds:
            last[0] = time.monotonic()
            action()

    return maybe
