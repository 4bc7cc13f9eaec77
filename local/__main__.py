"""``python -m local run [--plan plan.json] [--channel s3|valkey] [--epochs N] ...`` and
``python -m local profile [--memories MB ...] [--channel s3|valkey] ...``
(local/profile/profile_command.py) and ``python -m local instance-epoch --workload W``
(local/profile/instance_epoch.py).

Runs the CDK-synthesized state machine on this machine (see local/run/runner.py). Exit codes:
0 the run succeeded, 1 it failed or timed out, 2 bad input (nothing was started),
130 interrupted (everything started was stopped).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fasdl.contract.training import ADAPTIVE_POLICIES
from infra.lambda_errors import EXIT, OUT_OF_MEMORY
from local.aws import control_plane, interrupts
from local.aws.cache_plane import STATES as CACHE_STACK_STATES
from local.aws.cache_plane import CacheStackState
from local.faults.chaos_faults import StorageFaults
from local.faults.injection import InputError, parse_inject_env
from local.faults.service_faults import KINDS, OPTION, parse_service_fault
from local.lambda_.sandbox import DEFAULT_IDLE_S
from local.profile import instance_epoch, profile_command
from local.run.run_options import DEFAULT_WORKLOAD, RunOptions
from local.run.runner import run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m local")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser(
        "run", help="plan (or read) a job, synthesize the stack, run its state machine here")
    run_parser.add_argument("--plan", type=Path, help="a plan.json (default: plan --workload)")
    run_parser.add_argument("--channel", choices=("s3", "valkey"),
                            help="exchange channel (default: the plan's, s3 when planning)")
    run_parser.add_argument("--epochs", type=int, help="epochs (default when planning: the "
                            "workload's local job in local/run/jobs.py, e.g. 40 for cnn-digits)")
    run_parser.add_argument("--workers", type=int,
                            help="W (default 4 when planning; with --plan it must match)")
    run_parser.add_argument("--timeout", type=float, default=900.0,
                            help="wall-clock limit of the whole run in seconds (default 900)")
    run_parser.add_argument("--workers-timeout", type=float,
                            help="kill worker invocations after this many seconds "
                                 "(default: the synthesized function Timeout)")
    run_parser.add_argument("--segment-iterations", type=int,
                            help="iterations per segment (default when planning: one epoch)")
    run_parser.add_argument("--threads", type=int,
                            help="CPU threads per invocation (default 1, with --emulate-lambda "
                                 "ceil(M/1769); 0: no cap)")
    run_parser.add_argument("--workload", default=DEFAULT_WORKLOAD, metavar="NAME",
                            help="the shipped workload to plan and run when no --plan is given "
                                 f"(default {DEFAULT_WORKLOAD}; planner/data/workloads)")
    run_parser.add_argument("--adaptive", choices=ADAPTIVE_POLICIES,
                            help="a planned job's policy (planner plan --adaptive; default "
                                 "deadline); with --plan the plan's training.adaptive")
    run_parser.add_argument("--reference", action="store_true",
                            help="first train one process on the union of the workers' "
                                 "batches (same recipe and rows) and plot its curve beside "
                                 "the run's")
    run_parser.add_argument("--warm-idle", type=float, default=DEFAULT_IDLE_S, metavar="S",
                            help="reuse an idle sandbox of the same function for this many "
                                 f"seconds, like Lambda's warm starts (default "
                                 f"{DEFAULT_IDLE_S:.0f}; 0: every invocation starts cold)")
    run_parser.add_argument("--emulate-lambda", nargs="?", const="default", metavar="PLATFORM",
                            help="give each invocation Lambda's CPU (M/1769 vCPU) and channel "
                                 "bandwidth from a platform profile: a shipped name, a JSON "
                                 "path, or none for the channel's shipped profile "
                                 "(docs/emulation.md)")
    run_parser.add_argument("--cpu-slower", type=float, default=1.0, metavar="F",
                            help="with --emulate-lambda: a platform F times slower in the "
                                 "workers' compute (M/1769/F vCPU; 1-16, default 1)")
    run_parser.add_argument("--tls-cache", action="store_true",
                            help="valkey channel: a TLS + cluster-mode redis-server 7 "
                                 "(like ElastiCache Serverless) instead of valkey-server")
    run_parser.add_argument("--dataset", type=Path,
                            help="dir with x.npy, y.npy, test/ (default: build digits)")
    run_parser.add_argument("--cdk-out", type=Path,
                            help="reuse this synthesized cdk.out instead of running cdk synth")
    run_parser.add_argument("--report-dir", type=Path,
                            help="report folder (default reports/<run id>)")
    run_parser.add_argument("--run-id", help="execution and run id (default local-<time>)")
    _add_limit_options(run_parser)
    _add_fault_options(run_parser)
    profile_command.add_parser(commands)
    instance_epoch.add_parser(commands)
    return parser


def _add_limit_options(parser: argparse.ArgumentParser) -> None:
    """The run's limits, and keeping a stopped run to resume it."""
    parser.add_argument("--budget-usd", type=float, metavar="USD",
                        help="stop before a segment that would take the run past this "
                             "cost (instead of the plan's limits.budget_usd)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="when the run ends, copy its plan, dataset and results bucket "
                             "into DIR, so that a run a guard stopped can be resumed")
    parser.add_argument("--resume", type=Path, metavar="DIR",
                        help="continue the guard-stopped run kept in DIR (--keep) from its "
                             "checkpoint, as a resume execution does on AWS; "
                             "--budget-usd / --deadline-s replace its suggested limits")
    parser.add_argument("--deadline-s", type=float, metavar="S",
                        help="stop before a segment that would end past S seconds from "
                             "the start (instead of the plan's limits.deadline_s)")


def _add_fault_options(parser: argparse.ArgumentParser) -> None:
    """Faults to inject and the AWS account, cache stack and memory kills the run meets."""
    parser.add_argument("--inject-env", action="append", default=[],
                        metavar="ROLE:KEY=VALUE",
                        help="add KEY=VALUE to the environment of the worker, trigger or "
                             "finalize function (repeatable; e.g. worker:"
                             "FASDL_TEST_CRASH_AT_ITERATION=30 kills a worker there)")
    parser.add_argument("--restart-cache-at", type=int, metavar="N",
                        help="valkey channel: restart the Valkey server once workers "
                             "exchange iteration N (its keys are lost; fault demo/test)")
    parser.add_argument("--cache-at-peak", action="store_true",
                        help="valkey channel: cap the cache's data at the exchange's planned "
                             "peak times the headroom (fasdl.contract.cache), not at the whole "
                             "GB ElastiCache rounds up to: an undersized plan evicts here")
    parser.add_argument("--restart-s3-at", type=int, metavar="N",
                        help="restart the SeaweedFS server once the exchange holds "
                             "iteration N (its objects survive; clients ride out the outage)")
    parser.add_argument("--plant-stale-frame", type=int, metavar="N",
                        help="write a frame framed under an older epoch at the live epoch's "
                             "merged key of iteration N (or just ahead of the workers)")
    parser.add_argument("--truncate-frame", type=int, metavar="N",
                        help="write a torn (half) frame at the live epoch's merged key of "
                             "iteration N (or just ahead of the workers)")
    parser.add_argument("--start-twice", action="store_true",
                        help="start a second execution with the run's id once the first has "
                             "issued its epoch: it must fail with RunExists, touching nothing")
    parser.add_argument(OPTION, action="append", default=[],
                        metavar="FUNCTION[@ACTION]:ERROR[:N]",
                        help="the next N (default 1) invocations of the worker, trigger or "
                             "finalize function (@ACTION: whose event has that action) fail "
                             f"with a Lambda service error; ERROR: {', '.join(KINDS)} "
                             "(repeatable; e.g. worker:throttled:2, trigger@next:service)")
    control_plane.add_options(parser)
    parser.add_argument("--cache-stack", type=CacheStackState.parse,
                        default=CacheStackState(), metavar="|".join(CACHE_STACK_STATES),
                        help="valkey channel: the state of FasdlCacheStack as the trigger's "
                             "DescribeServerlessCaches sees it: deployed (default), absent "
                             "(destroyed: the run fails before any worker, saying how to "
                             "deploy it), creating:N (the first N lookups wait) or age:S "
                             "(deployed S s before the first lookup: a plan that waits for the "
                             "cache's pre-scaled minimum holds its first segment until the "
                             "cache is prediction.cache_wait_s old)")
    parser.add_argument("--oom-error", choices=(OUT_OF_MEMORY, EXIT),
                        default=OUT_OF_MEMORY,
                        help="how an invocation killed at its memory size is reported: "
                             f"{OUT_OF_MEMORY} (default) or {EXIT} 'signal: killed', as "
                             "Lambda has also reported it (the trigger then tells it from "
                             "a crash by the worker's REPORT lines)")
    parser.add_argument("--memory-limit", choices=("on", "off"), default="on",
                        help="kill an invocation whose processes use more than its memory "
                             "size, with Runtime.OutOfMemory, as Lambda does (default on; "
                             "off is for debugging, peaks are still measured)")


def _refused(args: argparse.Namespace) -> str | None:
    """What is wrong with the run's numbers and flags together, or None."""
    for name, value in (("--epochs", args.epochs), ("--workers", args.workers),
                        ("--timeout", args.timeout), ("--workers-timeout", args.workers_timeout),
                        ("--segment-iterations", args.segment_iterations),
                        ("--restart-cache-at", args.restart_cache_at),
                        ("--restart-s3-at", args.restart_s3_at),
                        ("--plant-stale-frame", args.plant_stale_frame),
                        ("--truncate-frame", args.truncate_frame),
                        ("--budget-usd", args.budget_usd), ("--deadline-s", args.deadline_s)):
        if value is not None and value <= 0:
            return f"{name} must be > 0, got {value}"
    if args.plan is not None and args.workload != DEFAULT_WORKLOAD:
        return "--workload plans a job; a --plan file already names its workload"
    if args.warm_idle < 0:
        return f"--warm-idle must be >= 0 s, got {args.warm_idle}"
    if args.threads is not None and args.threads < 0:
        return f"--threads must be >= 0, got {args.threads}"
    if args.cpu_slower != 1.0 and args.emulate_lambda is None:
        return "--cpu-slower slows the emulated Lambda CPU; pass --emulate-lambda with it"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "instance-epoch":
        return instance_epoch.main(args, say=lambda text: print(text, flush=True))
    if args.command == "profile":
        interrupts.install()  # SIGTERM unwinds like Ctrl-C, so everything is stopped
        return profile_command.main(args, say=lambda text: print(text, flush=True))
    refusal = _refused(args)
    if refusal is not None:
        print(f"fasdl local: {refusal}", file=sys.stderr)
        return 2
    try:
        injected = tuple(parse_inject_env(text) for text in args.inject_env)
        service_errors = tuple(parse_service_fault(text) for text in args.inject_service_error)
        account = control_plane.parse_account(args.account_concurrency, args.worker_state)
    except InputError as error:
        print(f"fasdl local: {error}", file=sys.stderr)
        return 2
    # Without --threads, emulated invocations get ceil(M/1769) threads, others 1.
    threads = 1 if args.threads is None and args.emulate_lambda is None else args.threads
    options = RunOptions(
        plan=args.plan, channel=args.channel, epochs=args.epochs, workers=args.workers,
        timeout_s=args.timeout, workers_timeout_s=args.workers_timeout,
        report_dir=args.report_dir, dataset_dir=args.dataset, cdk_out=args.cdk_out,
        segment_iterations=args.segment_iterations, threads=threads or None,
        emulate_lambda=args.emulate_lambda, cpu_slower=args.cpu_slower,
        tls_cache=args.tls_cache, run_id=args.run_id, inject_env=injected,
        restart_cache_at=args.restart_cache_at, memory_limit=args.memory_limit == "on",
        cache_at_peak=args.cache_at_peak,
        inject_service_errors=service_errors, account=account, cache_stack=args.cache_stack,
        oom_error=args.oom_error, warm_idle_s=args.warm_idle, workload=args.workload,
        reference=args.reference, budget_usd=args.budget_usd, deadline_s=args.deadline_s,
        storage_faults=StorageFaults(args.restart_s3_at, args.plant_stale_frame,
                                     args.truncate_frame),
        start_twice=args.start_twice, keep=args.keep, resume=args.resume,
        adaptive=args.adaptive)
    interrupts.install()
    try:
        return run(options, say=lambda text: print(text, flush=True))
    except KeyboardInterrupt:
        print("fasdl local: interrupted; stopped every server and invocation", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
