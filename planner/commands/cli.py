"""``python -m planner``: plan · compare · frontier · fit · workload · account.

Exit codes: 0 success, 2 bad input (the message names the argument), 3 nothing feasible (the
message names the binding constraint). With ``--json`` stdout carries exactly one JSON object,
errors included.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, NoReturn

from fasdl.contract.plan import EXCHANGE_DTYPES, PlanError
from planner.commands.account import add_account_arguments, command_account
from planner.commands.adaptive_plan import (
    adaptive_plan,
    add_adaptive_arguments,
    describe_adaptive,
    write_profiles,
)
from planner.commands.calibrate import add_calibrate_arguments, command_calibrate
from planner.commands.cli_inputs import (
    BATCH_STEP,
    EXIT_BAD_INPUT,
    EXIT_INFEASIBLE,
    EXIT_OK,
    MAX_GLOBAL_BATCH,
    CliError,
    add_instance_argument,
    add_limit_arguments,
    build_instances,
    build_problem,
    build_quotas,
    check_writable,
    limit_options,
    profiled_range_hint,
    write_atomically,
)
from planner.commands.fit_command import add_fit_arguments, command_fit
from planner.commands.planfile import confidence_section, plan_json, to_plan
from planner.commands.report import (
    choice_table,
    describe_choice,
    frontier_summary,
    instance_points,
    instance_report,
    render_frontier,
)
from planner.commands.workload_new import add_arguments as add_workload_arguments
from planner.commands.workload_new import command_workload
from planner.model.confidence import extrapolation_warnings
from planner.model.inputs.problem import Problem
from planner.model.inputs.recipe import add_recipe_arguments, describe_learning_rate
from planner.model.terms.channels import channel_costs
from planner.search.heuristic import DEFAULT_GAMMA_MIN, lambda_dnn, standalone, two_stage
from planner.search.quotas import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_MEMORY_MB,
    Quotas,
    Search,
    search_within,
)
from planner.search.searches import (
    AUTO,
    BN_RULES,
    PLAN_PATTERNS,
    SEARCHES,
    SearchResult,
    exact,
    exhaustive,
)

MAX_POINTS = 100  # frontier: each point is three searches


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        named = re.search(r"(--[a-z][a-z-]*)", message)
        raise CliError(named.group(1) if named else "<command>",
                       re.sub(r"^argument [^:]+: ", "", message))


def _add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", required=True,
                        help="shipped workload name (e.g. resnet50-cifar10) or a JSON file path")
    parser.add_argument("--deadline", type=float, required=True, help="T_max in seconds")
    parser.add_argument("--max-global-batch", type=int, required=True,
                        help=f"B^g_max, {BATCH_STEP}-{MAX_GLOBAL_BATCH}")
    parser.add_argument("--epochs", type=int, required=True, help="E, training epochs")
    parser.add_argument("--channel", choices=("s3", "valkey"), default="s3")
    parser.add_argument("--exchange-dtype", choices=EXCHANGE_DTYPES, default="float32",
                        help="what uploaded shards carry: float32 (the paper's) or bfloat16 "
                             "differences with error feedback (half the upload bytes)")
    parser.add_argument("--arch", choices=("x86_64", "arm64"), default="x86_64")
    parser.add_argument("--region", default=None,
                        help="the region to plan and deploy in: its shipped price table "
                             "(default us-east-1), or the region of --prices")
    parser.add_argument("--prices", default=None,
                        help="price table JSON of your own (the shipped tables' format, "
                             "docs/reference.md); its 'region' is the plan's")
    parser.add_argument("--platform", help="platform profile JSON (default: shipped profile)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="Lambda timeout in seconds (60-900, default 900)")
    parser.add_argument("--timeout-margin", type=float, default=None,
                        help="seconds a segment keeps free before the timeout, 0 to half of "
                             "--timeout (default min(60, 10%% of --timeout))")
    parser.add_argument("--min-workers", type=int, default=1,
                        help="smallest W to consider (2 excludes standalone runs)")
    parser.add_argument("--extrapolate-memory", action="store_true",
                        help="search every memory, also outside those the workload was "
                             "profiled at (default: within them, when the profile records "
                             "them; beyond, its time and memory fits are extrapolated)")
    parser.add_argument("--cache-warm", action="store_true",
                        help="Valkey: the cache stack already exists and serves its ECPU/s "
                             "minimum, so no fresh cache's ramp is charged (default: a "
                             "fresh cache, 30,000 ECPU/s doubling every 150 s)")
    parser.add_argument("--max-concurrency", type=int, default=None,
                        help="the account's Lambda concurrency quota; a run needs 2·W "
                             f"(default {DEFAULT_MAX_CONCURRENCY}, or --account's)")
    parser.add_argument("--max-memory", type=int, default=None,
                        help="the account's function-memory quota in MB, 128-10240 "
                             f"(default {DEFAULT_MAX_MEMORY_MB}, or --account's)")
    parser.add_argument("--account", default=None, metavar="FILE",
                        help="the limits python -m planner account read (account.json): "
                             "the quotas, recorded in the plan; the two flags above may "
                             "only lower them")
    parser.add_argument("--bn-rule", choices=BN_RULES, default=None,
                        help="B^n of K-REDUCE: search (every multiple of 16 within the caps, "
                             "the default of the exact and exhaustive searches) or align (the "
                             "paper's alignment rule, which two-stage always uses)")
    add_instance_argument(parser)
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    add_recipe_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m planner", description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = commands.add_parser("plan", help="choose the cheapest configuration; write plan.json")
    _add_problem_arguments(plan)
    plan.add_argument("--search", choices=SEARCHES, default="exact")
    plan.add_argument("--pattern", choices=PLAN_PATTERNS, default=AUTO,
                      help="auto (default): K-REDUCE phased as in the paper or pipelined "
                           "(shards in chunks), whichever is cheaper; two-stage searches "
                           "the phased one only")
    plan.add_argument("--gamma-min", type=float, default=DEFAULT_GAMMA_MIN,
                      help="two-stage only: γ_min of the batch lower bound (0-1)")
    plan.add_argument("--literal-early-stop", action="store_true",
                      help="two-stage only: the early stop exactly as printed in Alg. 3.1")
    plan.add_argument("--out", help="write the plan JSON here (e.g. plan.json)")
    add_limit_arguments(plan)
    add_adaptive_arguments(plan)
    plan.add_argument("--explain", action="store_true",
                      help="also compare one instance (GPU, CPU, --instance) and say which "
                           "option is cheapest and which meets the deadline")
    compare = commands.add_parser("compare", help="K-REDUCE vs the baselines and one instance")
    _add_problem_arguments(compare)
    frontier = commands.add_parser("frontier", help="minimum cost vs deadline; instances too")
    _add_problem_arguments(frontier)
    frontier.add_argument("--png", required=True, help="output PNG file")
    frontier.add_argument("--points", type=int, default=40, help="deadlines to sample (>= 2)")
    add_fit_arguments(commands.add_parser(
        "fit", help="fit workload/platform profiles from profiler samples (JSONL)"))
    workload = commands.add_parser("workload", help="workloads of your own model and data")
    kinds = workload.add_subparsers(dest="workload_command", required=True,
                                    parser_class=_Parser)
    add_workload_arguments(kinds.add_parser(
        "new", help="write a workload (model_mb, samples, dataset_mb measured; not profiled)"))
    add_account_arguments(commands.add_parser(
        "account", help="read this AWS account's Lambda limits; write account.json"))
    add_calibrate_arguments(commands.add_parser(
        "calibrate", help="refit the workload's compute and the platform's cold start from "
                          "runs' summaries; old vs new prediction error"))
    return parser


def _run_search(args: argparse.Namespace, problem: Problem, quotas: Quotas) -> SearchResult:
    if args.search == "two-stage":
        if args.bn_rule == "search":
            raise CliError("--bn-rule", "two-stage reproduces the paper, whose B^n is the "
                                        "alignment rule's; use --search exact to search B^n")
        if args.pattern not in ("kreduce", AUTO):
            raise CliError("--search", "two-stage searches K-REDUCE only; use --search exact "
                                       f"for --pattern {args.pattern}")
        if not 0.0 < args.gamma_min < 1.0:
            raise CliError("--gamma-min", f"must be in (0, 1), got {args.gamma_min}")
        return search_within(problem, quotas, partial(
            two_stage, gamma_min=args.gamma_min, literal_early_stop=args.literal_early_stop))
    rule = args.bn_rule or "search"
    fast: Search = partial(exact, pattern=args.pattern, bn_rule=rule)
    if args.search == "exhaustive":
        # Whether raising a quota helps is asked of exact: the same grid and optimum, faster.
        return search_within(problem, quotas,
                             partial(exhaustive, pattern=args.pattern, bn_rule=rule), fast)
    return search_within(problem, quotas, fast)


def command_plan(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    limits = limit_options(args)  # first: --deadline's range here depends on the slack
    problem, quotas = build_problem(args), build_quotas(args)
    # --instance asks for the comparison too: a flag that changed nothing would mislead
    instances = build_instances(args, problem) if args.explain or args.instance else None
    if args.out:
        check_writable("--out", args.out)
    result = _run_search(args, problem, quotas)
    problem, result, converted = _single_worker_on_s3(args, problem, quotas, result)
    explained = (instance_report(problem, [result], instances, "plan")
                 if instances is not None else ([], {}))
    if result.choice is None:
        return _infeasible(args, result, emit, explained, profiled_range_hint(problem, args))
    try:
        plan = adaptive_plan(to_plan(problem, result.choice, search=result.method,
                                     quotas=quotas, **limits), args, quotas)
        plan.check_environment_size()  # what the synth will ask of it
    except PlanError as error:  # a choice the contract refuses: name where it came from
        raise CliError("--workload", str(error)) from error
    profiles = None
    if args.out:
        write_atomically("--out", args.out, plan_json(problem, result.choice, plan))
        profiles = write_profiles(plan, args.out, problem)
    warnings = converted + extrapolation_warnings(problem.workload, result.choice.memory_mb)
    if args.json:
        emit(json.dumps({"status": "ok", "search": _search_summary(result),
                         "plan": plan.to_dict(),
                         "confidence": confidence_section(problem, result.choice),
                         "out": args.out, "profiles": profiles, "warnings": warnings,
                         **explained[1]}))
    else:
        emit(describe_choice(problem, result))
        emit(describe_learning_rate(plan.training))
        emit(describe_adaptive(plan, args.out))
        for warning in warnings:
            emit(f"warning: {warning}")
        for line in explained[0]:
            emit(line)
        if args.out:
            emit(f"wrote {args.out}" + (f" and {profiles}" if profiles else ""))
    return EXIT_OK


def _single_worker_on_s3(args: argparse.Namespace, problem: Problem, quotas: Quotas,
                         result: SearchResult) -> tuple[Problem, SearchResult, list[str]]:
    """A Valkey choice of W = 1 exchanges nothing, yet would deploy a VPC and a cache (the
    synth refuses it): that one worker is planned on S3 instead (the store's
    ``lone_worker_channel``), with a warning."""
    fallback = channel_costs(problem).lone_worker_channel
    if fallback is None or result.choice is None or result.choice.workers != 1:
        return problem, result, []
    why = "the cheapest Valkey configuration has W = 1, which exchanges nothing"
    if args.platform:  # a Valkey profile of the user's: no S3 one to plan with
        raise CliError("--channel", f"{why}; with --platform (a valkey profile) it cannot be "
                                    "planned on S3 here: pass --channel s3 without it, or "
                                    "--min-workers 2 for Valkey workers that exchange")
    on_s3 = argparse.Namespace(**{**vars(args), "channel": fallback})
    single = replace(build_problem(on_s3), max_workers=1)
    planned = _run_search(on_s3, single, quotas)
    if planned.choice is None:
        raise CliError("--channel", f"{why}, and one worker on S3 is infeasible "
                                    f"({planned.reason}); pass --min-workers 2")
    return single, planned, [f"{why}: planned on S3 instead (no VPC, no cache); "
                             "--min-workers 2 plans Valkey workers that exchange"]


def comparison(problem: Problem, quotas: Quotas | None = None,
               bn_rule: str = "search") -> list[SearchResult]:
    """K-REDUCE first (the reference), then the baselines, all distributed (W >= 2) under the
    same model and the same account quotas; standalone and the unrestricted optimum (any W)
    close the table. Two-stage keeps the paper's alignment rule whatever ``bn_rule`` says."""
    quotas = quotas or Quotas()
    distributed = replace(problem, min_workers=max(2, problem.min_workers))
    kreduce = partial(exact, bn_rule=bn_rule)
    runs: list[tuple[Problem, Search]] = [
        (distributed, kreduce), (distributed, two_stage),
        (distributed, partial(exact, pattern="kreduce-pipelined", bn_rule=bn_rule)),
        (distributed, partial(exact, pattern="scatterreduce")),
        (distributed, partial(exact, pattern="allreduce")), (distributed, lambda_dnn),
        (problem, standalone), (problem, kreduce)]
    results = [search_within(base, quotas, search) for base, search in runs]
    results[-1] = replace(results[-1], method="exact, any W")
    return results


def command_compare(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    problem, quotas = build_problem(args), build_quotas(args)
    instances = build_instances(args, problem)
    results = comparison(problem, quotas, args.bn_rule or "search")
    reference = results[0].choice
    lines, fields = instance_report(problem, results, instances, "K-REDUCE")
    if args.json:
        emit(json.dumps({"status": "ok" if reference else "infeasible",
                         "results": [_search_summary(r) for r in results], **fields}))
    else:
        emit("\n".join([choice_table(problem, results), "", *lines]))
    return EXIT_OK if reference else EXIT_INFEASIBLE


def command_frontier(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    problem, quotas = build_problem(args), build_quotas(args)
    runs = build_instances(args, problem).runs
    if not 2 <= args.points <= MAX_POINTS:
        raise CliError("--points", f"must be in [2, {MAX_POINTS}], got {args.points}")
    check_writable("--png", args.png)
    bounded = quotas.apply(problem)
    if bounded is None:  # e.g. --min-workers above half of --max-concurrency
        return _infeasible(args, search_within(problem, quotas, exact), emit)
    try:
        curves = render_frontier(bounded, args.png, points=args.points,
                                 bn_rule=args.bn_rule or "search", instances=runs)
    except OSError as error:
        raise CliError("--png", f"cannot write {args.png}: {error}") from error
    if args.json:
        emit(json.dumps({"status": "ok", "png": args.png, "curves": curves,
                         "instances": instance_points(runs)}))
    else:
        emit(f"wrote {args.png}: {frontier_summary(curves, runs)}")
    return EXIT_OK


def _search_summary(result: SearchResult) -> dict[str, Any]:
    choice = result.choice
    summary: dict[str, Any] = {"method": result.method, "pattern": result.pattern,
                               "feasible": choice is not None, "reason": result.reason,
                               "evaluated": result.evaluated,
                               "elapsed_s": round(result.elapsed_s, 6)}
    if choice is not None:
        summary["choice"] = {
            "workers": choice.workers, "memory_mb": choice.memory_mb,
            "aggregators": choice.aggregators, "batch_aggregator": choice.batch_aggregator,
            "batch_non_aggregator": choice.batch_non_aggregator, "sync": choice.sync,
            "time_s": choice.time_s, "cost_usd": choice.cost_usd,
            "global_batch": choice.global_batch, "segments": choice.segments,
            "segment_iterations": choice.segment_iterations, "breakdown": choice.breakdown,
        }
    return summary


def _infeasible(args: argparse.Namespace, result: SearchResult, emit: Callable[[str], None],
                explained: tuple[list[str], dict[str, Any]] | None = None,
                hint: str = "") -> int:
    """Nothing on Lambda fits; with --explain the instance rows still say what would."""
    lines, fields = explained or ([], {})
    if args.json:
        emit(json.dumps({"status": "infeasible", "search": _search_summary(result),
                         **({"hint": hint.strip(" ()")} if hint else {}), **fields}))
    else:
        print(f"infeasible: {result.reason}{hint}", file=sys.stderr)
        for line in lines:
            emit(line)
    return EXIT_INFEASIBLE


COMMANDS: dict[str, Callable[[argparse.Namespace, Callable[[str], None]], int]] = {
    "plan": command_plan, "compare": command_compare, "frontier": command_frontier,
    "fit": command_fit, "workload": command_workload, "account": command_account,
    "calibrate": command_calibrate,
}


def _out_of_memory(command: str) -> CliError:
    if command == "fit":
        return CliError("--samples", "the fit ran out of memory; pass fewer samples")
    return CliError("--max-global-batch", "the search ran out of memory; lower it (allowed "
                    f"{BATCH_STEP}-{MAX_GLOBAL_BATCH}; the exhaustive and heuristic searches "
                    "grow with it, the exact one is bounded)")


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    wants_json = "--json" in arguments
    try:
        args = build_parser().parse_args(arguments)
        try:
            return COMMANDS[args.command](args, print)
        except MemoryError as error:  # it outgrew this machine: say which flag shrinks it
            raise _out_of_memory(args.command) from error
    except CliError as error:
        if wants_json:
            print(json.dumps({"status": "error", "argument": error.argument,
                              "message": str(error)}))
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
