"""``python -m local run``: the synthesized state machine, end to end, on this machine.

1. plan a small job with the planner (cnn-digits, W=4) or read ``--plan``; print it;
2. ``npx cdk synth`` that plan (or reuse ``--cdk-out``) and read the template;
3. start the servers on free loopback ports (local/run/run_servers.py); upload the dataset;
4. run the definition in moto's ASL interpreter, every Lambda call in its own emulated
   invocation (local/aws/adapter.py, local/lambda_/emulator.py), printing each finished segment;
5. print the summary and write the report folder; stop everything (also on Ctrl-C, after
   writing a partial report with status ``INTERRUPTED``).

Fault injection for tests and demos: ``inject_env`` adds variables to one function's
environment (e.g. the worker's ``FASDL_TEST_CRASH_AT_ITERATION``, fasdl.run.fault_hooks);
``restart_cache_at`` restarts the Valkey server once the workers exchange shards of iteration
N (its keys are lost, like a cache node replaced mid-run); ``inject_service_errors`` makes the
first N invocations of a function fail with a Lambda service error, nothing run
(local/faults/service_faults.py); ``account`` and ``cache_stack``: what the trigger's AWS calls see
(control_plane.py, cache_plane.py). Every invocation is held to its memory size unless
``memory_limit`` is off (``oom_error`` names the kill); report.json records peaks and errors.

Bad input (corrupt plan, W mismatch, missing dataset, plan for another stack) raises
:class:`InputError` before any server or worker starts: exit code 2.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from fasdl.contract.plan import Plan, PlanError
from local.aws.adapter import LocalStepFunctions, emulator_router
from local.aws.control_plane import WorkerFunction
from local.aws.template import LocalTemplate, TemplateError
from local.faults.chaos_faults import with_storage_faults
from local.faults.injection import ROLES, InputError, restarting
from local.faults.service_faults import ServiceFault
from local.lambda_.emulator import LambdaEmulator
from local.lambda_.invocation import FunctionSpec
from local.lambda_.lambda_speed import EmulationError, LambdaEmulation, load_emulation
from local.run.kept_run import Resumption, keep_run, load_kept, restore_results
from local.run.report import Progress
from local.run.run_limits import with_limits
from local.run.run_options import RunOptions
from local.run.run_prep import (
    PLANNED_NAME,
    copy_profiles,
    plan_text,
    prepare_dataset,
    prepare_plan,
    prepare_template,
    whole_epoch_segments,
)
from local.run.run_report import FinishedRun, wait_and_report
from local.run.run_servers import RunServers, cache_report, cap_planned_cache, start_servers
from local.run.second_start import SecondStart, with_second_start
from local.servers.layout import BUCKETS

WORKER_HANDLER = "handlers.worker"
Say = Callable[[str], None]


# ---- run --------------------------------------------------------------------------------------
def run(options: RunOptions, say: Say = print) -> int:
    work = Path(tempfile.mkdtemp(prefix="fasdl-local-"))
    try:
        try:
            options, resumed = _resuming(options)
            plan = prepare_plan(options, work, say)
            emulation = None if options.emulate_lambda is None else load_emulation(
                options.emulate_lambda, channel=plan.deployment.channel,
                cpu_slower=options.cpu_slower)
            if options.restart_cache_at is not None and plan.deployment.channel != "valkey":
                raise InputError("--restart-cache-at needs the valkey channel")
            plan, files = prepare_dataset(plan, options, work, say)
            if options.plan is None and not options.segment_iterations:
                plan = whole_epoch_segments(plan)
            if resumed is None:  # a resumed run's limits go in its input
                plan = with_limits(plan, budget_usd=options.budget_usd,
                                   deadline_s=options.deadline_s)
            plan_path = work / "plan.json"
            plan.save(plan_path)
            if plan.training.adaptive != "off":  # its profiles, for its re-plan
                copy_profiles(options.plan or work / PLANNED_NAME, plan_path)
            say(plan_text(plan))
            template = prepare_template(plan, plan_path, options, work, say)
            worker = WorkerFunction.of(template, options.account, WORKER_HANDLER)
            curve = _reference(plan, files, say) if options.reference else None
        except (InputError, PlanError, EmulationError) as error:
            print(f"fasdl local: {error}", file=sys.stderr)
            return 2
        except TemplateError as error:
            print(f"fasdl local: {error}", file=sys.stderr)
            return 1
        return _execute(plan, files, template, options, work, say, worker, emulation,
                        reference=curve, resumed=resumed)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _resuming(options: RunOptions) -> tuple[RunOptions, Resumption | None]:
    """With --resume: the kept run's plan, dataset and id, and its execution input (checked
    here, before anything starts); else ``options`` unchanged and None."""
    if options.resume is None:
        return options, None
    if options.plan is not None or options.dataset_dir is not None:
        raise InputError("--resume: the kept run's plan and dataset are used; drop --plan "
                         "and --dataset")
    kept = load_kept(options.resume)
    if options.run_id not in (None, kept.run_id):
        raise InputError(f"--run-id: a resumed run keeps its id ({kept.run_id}), got "
                         f"{options.run_id}")
    execution_input = kept.execution_input(budget_usd=options.budget_usd,
                                           deadline_s=options.deadline_s)
    return (replace(options, plan=kept.plan, dataset_dir=kept.dataset, run_id=kept.run_id),
            Resumption(kept, execution_input))


def _reference(plan: Plan, files: dict[str, Path], say: Say) -> list[dict[str, Any]]:
    # torch only when asked: it costs every run's parent process seconds of imports
    from local.run.reference import single_process_reference

    return single_process_reference(plan, files, say)


def _execute(plan: Plan, files: dict[str, Path], template: LocalTemplate, options: RunOptions,
             work: Path, say: Say, worker: WorkerFunction,
             emulation: LambdaEmulation | None = None, *,
             reference: list[dict[str, Any]] | None = None,
             resumed: Resumption | None = None) -> int:
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
        _upload_dataset(client, plan, files, say)

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
        run_input, execution = _run_input(plan, options, run_id, client, resumed, say)
        sfn.start(machine, execution, run_input)
        second = (SecondStart(sfn, machine, run_id, run_input, client, say)
                  if options.start_twice else None)
        on_poll = with_second_start(_every(2.0, progress.poll), second)
        if options.restart_cache_at is not None and cache is not None:
            on_poll = restarting(on_poll, cache, run_id, options.restart_cache_at, say)
        on_poll = with_storage_faults(on_poll, options.storage_faults, run_id=run_id, s3=s3,
                                      s3_client=client, cache=cache, say=say)
        finished = FinishedRun(
            plan, run_id, report_dir, client, BUCKETS["FASDL_RESULTS_BUCKET"], emulator,
            progress, roles, worker_function, cache, options.memory_limit, started, reference,
            second, "local" if emulation is None else emulation.describe_platform())
        status = wait_and_report(finished, sfn, machine, timeout_s=options.timeout_s,
                                 on_poll=on_poll, say=say)
        if options.keep is not None:
            _keep(options.keep, run_id, work, files, client, report_dir, say)
        for line in cache_report(servers, report_dir):
            say(line)
    say("stopped all local servers and invocations")
    return 0 if status == "SUCCEEDED" else 1


def _upload_dataset(client: Any, plan: Plan, files: dict[str, Path], say: Say) -> None:
    prefix = plan.workload.dataset.rstrip("/")
    for name, path in files.items():
        client.upload_file(str(path), BUCKETS["FASDL_DATASETS_BUCKET"], f"{prefix}/{name}")
    say(f"uploaded the dataset to s3://{BUCKETS['FASDL_DATASETS_BUCKET']}/{prefix}/")


def _run_input(plan: Plan, options: RunOptions, run_id: str, client: Any,
               resumed: Resumption | None, say: Say) -> tuple[dict[str, Any], str]:
    """The execution's input and name: a new run's, or (--resume) the kept run's resume input
    once its results objects are back in the results bucket."""
    if resumed is not None:
        restored = restore_results(resumed.kept, client, BUCKETS["FASDL_RESULTS_BUCKET"])
        say(f"resuming run {run_id} from {resumed.kept.directory} ({restored} results objects "
            f"restored), limits {resumed.execution_input.get('limits')}")
        return resumed.execution_input, f"{run_id}-resumed"
    run_input: dict[str, Any] = {"run_id": run_id}
    if options.cdk_out is not None:  # the stack's deployed plan may differ in training
        run_input["plan"] = plan.to_dict()
    return run_input, run_id


def _keep(directory: Path, run_id: str, work: Path, files: dict[str, Path], client: Any,
          report_dir: Path, say: Say) -> None:
    """--keep: what a resume needs, copied out before the servers stop (kept_run.py)."""
    kept = keep_run(directory, run_id=run_id, plan_path=work / "plan.json", files=files,
                    client=client, bucket=BUCKETS["FASDL_RESULTS_BUCKET"],
                    report=json.loads((report_dir / "report.json").read_text()))
    say(f"kept the run in {directory} ({kept} results objects)")


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
    return [replace(fault, function=names[fault.function])
            for fault in options.inject_service_errors]


def _every(seconds: float, action: Callable[[], None]) -> Callable[[], None]:
    last = [0.0]

    def maybe() -> None:
        if time.monotonic() - last[0] >= seconds:
            last[0] = time.monotonic()
            action()

    return maybe
