"""The planner CLI's inputs: flags and profile files turned into a :class:`Problem`, every bad
value an error (:class:`CliError`, exit 2) naming a flag that exists and, for a field of a
workload or platform file, the file and its field.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from fasdl.contract.fields import FieldError
from fasdl.contract.limits import BUDGET_FACTOR, DEADLINE_SLACK, MAX_BUDGET_USD, MAX_DEADLINE_S
from fasdl.contract.plan import PlanError
from planner.model.inputs.problem import ModelInputError, Problem, default_timeout_margin
from planner.model.inputs.profile_fields import read_profile_json
from planner.model.inputs.profiles import (
    Prices,
    ProfileError,
    WorkloadProfile,
    known_workloads,
    load_platform,
    load_platform_file,
    load_prices,
    load_workload,
)
from planner.model.inputs.recipe import FLAGS as RECIPE_FLAGS
from planner.model.instance.options import (
    INSTANCE_FORMAT,
    InstanceError,
    InstanceOption,
    InstanceRun,
    parse_instance,
    price_run,
)
from planner.model.instance.shipped import billing_rule, default_user_startup_s, shipped_options
from planner.search.quotas import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_MEMORY_MB,
    AccountLimits,
    Quotas,
)

# The planner's exit statuses: done, bad input (one line naming the flag), no plan fits
EXIT_OK, EXIT_BAD_INPUT, EXIT_INFEASIBLE = 0, 2, 3
DEFAULT_REGION = "us-east-1"  # the region of the shipped price table used without --region
# Problem fields and the CLI arguments that set them, so errors name what the user typed.
FIELD_TO_ARGUMENT = {
    "epochs": "--epochs", "deadline_s": "--deadline", "max_global_batch": "--max-global-batch",
    "timeout_s": "--timeout", "timeout_margin_s": "--timeout-margin", "workload": "--workload",
    "channel": "--channel", "arch": "--arch", "region": "--region", "prices": "--region",
    "min_workers": "--min-workers", "max_concurrency": "--max-concurrency",
    "max_memory_mb": "--max-memory",
}
# Profile fields `fit` takes from an option; every other field is fitted from --samples.
FIT_FIELD_TO_ARGUMENT = {
    "name": "--name", "dataset": "--dataset", "samples": "--dataset-samples",
    "dataset_mb": "--dataset-mb", "model_mb": "--model-mb", "channel": "--channel",
    "arch": "--arch", "invocation_overhead_s": "--invocation-overhead",
}
# The exact search is a branch and bound with memory bounded by its chunks
# (planner/search/bounds.py): up to this global batch with W up to 1,000 it stays well within
# its time and memory goals (measured: docs/results.md, "Planner search", bench/planner_search.py
# --large). Beyond it nothing is measured, and ImageNet-size global batches (8k-64k) fit.
MAX_GLOBAL_BATCH = 65536
BATCH_STEP = Problem.batch_step  # the step of B^a in every search

_Loaded = TypeVar("_Loaded")


class CliError(Exception):
    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"argument {argument}: {message}")
        self.argument = argument


def _load(argument: str, loader: Callable[..., _Loaded], *values: str) -> _Loaded:
    """A profile from ``loader``; any error is the argument's that named the profile."""
    try:
        return loader(*values)
    except ProfileError as error:
        raise CliError(argument, str(error)) from error


def _load_file(argument: str, kind: str, loader: Callable[[str], _Loaded], value: str,
               shipped: bool = False) -> _Loaded:
    """A profile named by ``argument``; a bad field is the file's field (``workload file X:
    field 'm': ...``), never a flag named after the field."""
    try:
        return loader(value)
    except ProfileError as error:
        if error.field in (None, "<file>", "workload"):  # the message names the file already
            raise CliError(argument, str(error)) from error
        where = f"shipped {kind} {value}" if shipped else f"{kind} file {value}"
        field = "" if error.field == "<root>" else f" field '{error.field}':"
        raise CliError(argument, f"{where}:{field} {error.detail}") from error


def build_problem(args: argparse.Namespace) -> Problem:
    _check_global_batch(args.max_global_batch)
    workload = _load_file("--workload", "workload", load_workload, args.workload,
                          shipped=args.workload in known_workloads())
    workload = _with_recipe_flags(workload, args)
    check_model(workload)
    if args.platform:
        platform = _load_file("--platform", "platform", load_platform_file, args.platform)
        if (platform.channel, platform.arch) != (args.channel, args.arch):
            raise CliError("--platform", f"profile is for {platform.channel}/{platform.arch} but "
                           f"--channel {args.channel} --arch {args.arch} were asked for")
    else:
        platform = _load("--channel", load_platform, args.channel, args.arch)
    prices = build_prices(args)
    margin = (default_timeout_margin(args.timeout) if args.timeout_margin is None
              else args.timeout_margin)
    try:
        problem = Problem(workload=workload, platform=platform, prices=prices,
                          epochs=args.epochs, deadline_s=args.deadline,
                          max_global_batch=args.max_global_batch, timeout_s=args.timeout,
                          timeout_margin_s=margin, min_workers=args.min_workers,
                          exchange_dtype=args.exchange_dtype, cache_warm=args.cache_warm)
    except ModelInputError as error:
        raise _problem_error(error, args) from error
    _check_min_workers(problem)
    return problem if args.extrapolate_memory else within_profiled_memory(problem)


def within_profiled_memory(problem: Problem) -> Problem:
    """M on the planner's grid within the memories the workload was profiled at (its
    ``profiled_memory_mb``, written by python -m local profile); a profile without them is
    searched as before. Beyond them the fit's time and memory are extrapolated."""
    profiled = problem.workload.profiled_memory_mb
    if not profiled:
        return problem
    step = problem.memory_step_mb
    low = max(problem.memory_min_mb, math.ceil(profiled[0] / step) * step)
    high = min(problem.memory_max_mb, math.floor(profiled[1] / step) * step)
    if low > high:
        raise CliError("--workload", f"the workload was profiled at {profiled[0]:g}-"
                       f"{profiled[1]:g} MB and no memory of the planner's {step} MB grid lies "
                       f"within: profile a wider range (python -m local profile --memories) or "
                       f"pass --extrapolate-memory")
    return replace(problem, memory_min_mb=low, memory_max_mb=high)


def profiled_range_hint(problem: Problem, args: argparse.Namespace) -> str:
    """What an infeasible plan adds when its memory was held within the profiled range."""
    if not problem.workload.profiled_memory_mb or args.extrapolate_memory:
        return ""
    return (f" (memory searched within the profiled {problem.memory_min_mb}-"
            f"{problem.memory_max_mb} MB; --extrapolate-memory searches beyond)")


def build_prices(args: argparse.Namespace) -> Prices:
    """The shipped table of --region (default us-east-1), or --prices FILE (same format), whose
    region must be --region's when both are given; the plan deploys to the table's region."""
    if args.prices is None:
        return _load("--region", load_prices, args.region or DEFAULT_REGION)
    prices = _load_file("--prices", "price table", _prices_file, args.prices)
    if args.region is not None and prices.region != args.region:
        raise CliError("--prices", f"price table {args.prices} is for region {prices.region!r} "
                                   f"but --region {args.region} was asked for: pass a table "
                                   f"whose 'region' is {args.region!r}")
    return prices


def _prices_file(path: str) -> Prices:
    return Prices.from_dict(read_profile_json(Path(path), "price table"))


def check_model(workload: WorkloadProfile) -> None:
    """Build the workload's model as a worker will (on the meta device) before any plan is
    written: an unknown name, a missing file or function, a wrong signature or input shape, or
    a model_mb that is not the model's, is the workload's error (exit 2)."""
    from fasdl.contract.user_code import UserCodeError  # torch: only once a plan is asked for
    from fasdl.training.model_check import check_workload

    try:
        check_workload(workload.workload)
    except (PlanError, UserCodeError) as error:
        raise CliError("--workload", f"workload {workload.name}: {error}") from error


def _with_recipe_flags(workload: WorkloadProfile, args: argparse.Namespace
                       ) -> WorkloadProfile:
    """The workload with the command line's recipe overrides; a bad value names its flag."""
    try:
        return replace(workload, recipe=workload.recipe.with_flags(args))
    except (PlanError, ProfileError) as error:
        field = str(getattr(error, "field", "")).removeprefix("recipe.")
        flag = next((flag for flag, name in RECIPE_FLAGS.items() if name == field), "--workload")
        raise CliError(flag, str(error).split("': ", 1)[-1]) from error


def _check_global_batch(cap: int) -> None:
    if not BATCH_STEP <= cap <= MAX_GLOBAL_BATCH:
        why = (f"the searches' batches are multiples of {BATCH_STEP}, so a smaller cap admits "
               "none" if cap < BATCH_STEP else
               f"the searches are measured up to {MAX_GLOBAL_BATCH:,} (ImageNet-size global "
               "batches are 8k-64k); lower it")
        raise CliError("--max-global-batch",
                       f"must be in [{BATCH_STEP}, {MAX_GLOBAL_BATCH}]: {why}; got {cap}")


def _check_min_workers(problem: Problem) -> None:
    """Each worker trains at least one batch step, so W <= B^g_max / 16."""
    limit = problem.worker_limit()
    if problem.min_workers > limit:
        raise CliError("--min-workers", f"must be in [1, {limit}]: each of W workers trains at "
                       f"least {problem.batch_step} samples, so --max-global-batch "
                       f"{problem.max_global_batch} allows W <= {limit}; got "
                       f"{problem.min_workers}")


def _problem_error(error: ModelInputError, args: argparse.Namespace) -> CliError:
    argument = FIELD_TO_ARGUMENT.get(error.field, "<command>")
    message = str(error).removeprefix(f"{error.field}: ")
    if error.field == "timeout_margin_s":  # only a given margin: the default always fits
        message = (f"must be in [0, {args.timeout / 2:g}] s, at most half of --timeout "
                   f"{args.timeout:g}, got {args.timeout_margin:g}")
    return CliError(argument, message)


@dataclass(frozen=True)
class Instances:
    """The instance rows of a problem: shipped where measured, then the user's --instance."""

    runs: tuple[InstanceRun, ...]
    notes: tuple[str, ...]  # why a shipped row is missing
    billing: str


def add_instance_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instance", action="append", metavar=INSTANCE_FORMAT,
                        help="one machine of yours to compare (repeatable): USD an hour "
                             "(0-1000], measured seconds an epoch (0-1e7], start-up seconds "
                             "[0-86400] (default 60); a shipped name (p5.4xlarge, "
                             "c7i.4xlarge) replaces that row")


def build_instances(args: argparse.Namespace, problem: Problem) -> Instances:
    """Shipped offers for the workload plus each ``--instance``; a user's row replaces a
    shipped one of the same name (e.g. your discounted price for it)."""
    shipped = shipped_options(problem.workload, problem.max_global_batch)
    own: dict[str, InstanceOption] = {}
    for text in args.instance or []:
        try:
            option = parse_instance(text, default_user_startup_s())
        except InstanceError as error:
            raise CliError("--instance", f"{error.field}: {error.detail} (format "
                                         f"{INSTANCE_FORMAT}, got {text!r})") from error
        if option.name in own:
            raise CliError("--instance", f"name {option.name!r} given twice; each "
                                         "--instance needs its own NAME")
        own[option.name] = option
    options = [o for o in shipped.options if o.name not in own] + list(own.values())
    return Instances(runs=tuple(price_run(o, problem.epochs, problem.deadline_s)
                                for o in options),
                     notes=shipped.notes, billing=billing_rule())


def build_quotas(args: argparse.Namespace) -> Quotas:
    """--max-concurrency and --max-memory (defaults: Lambda's); with --account, the account's
    limits, which the two flags may only lower."""
    account = None if args.account is None else load_account(args.account, build_prices(args))
    try:
        if account is not None:
            return Quotas.of_account(account, args.max_concurrency, args.max_memory)
        return Quotas(
            max_concurrency=(DEFAULT_MAX_CONCURRENCY if args.max_concurrency is None
                             else args.max_concurrency),
            max_memory_mb=DEFAULT_MAX_MEMORY_MB if args.max_memory is None else args.max_memory)
    except ModelInputError as error:
        raise CliError(FIELD_TO_ARGUMENT[error.field],
                       str(error).removeprefix(f"{error.field}: ")) from error


def load_account(path: str, prices: Prices) -> AccountLimits:
    """The file ``python -m planner account`` wrote; its region must be the plan's."""
    try:
        account = AccountLimits.from_dict(read_profile_json(Path(path), "account file"))
    except FieldError as error:
        if error.field == "<file>":  # unreadable, or not JSON: the message names the file
            raise CliError("--account", error.detail) from error
        where = "" if error.field in (None, "<root>") else f" field '{error.field}':"
        raise CliError("--account", f"account file {path}:{where} {error.detail}") from error
    if account.region != prices.region:
        raise CliError("--account", f"account file {path} holds the limits of region "
                                    f"{account.region} but the plan is for {prices.region}: run "
                                    f"python -m planner account --region {prices.region}")
    return account


def fit_profile_error(error: ProfileError) -> CliError:
    """A fitted profile the profile checks refuse: the option that set the field, else the
    samples the field was fitted from (there is no --a or --m)."""
    field = error.field or "samples"
    argument = FIT_FIELD_TO_ARGUMENT.get(field)
    if argument is not None:
        return CliError(argument, f"profile field '{field}': {error.detail}")
    return CliError("--samples", f"profile field '{field}' fitted from the samples: "
                                 f"{error.detail}")


def check_writable(argument: str, path: str) -> None:
    """Refuse an output path before a search that may take a while, not after it."""
    target = Path(path)
    try:
        folder = target.parent
        if target.is_dir():
            raise CliError(argument, f"{path} is a folder; name a file")
        if not folder.is_dir():
            raise CliError(argument, f"folder {folder} of {path} does not exist")
        writable = os.access(folder, os.W_OK | os.X_OK) and (
            not target.exists() or os.access(target, os.W_OK))
    except (OSError, ValueError) as error:  # e.g. a name too long or with a NUL byte
        raise CliError(argument, f"cannot write {path!r}: {error}") from error
    if not writable:
        raise CliError(argument, f"cannot write {path}: permission denied")


def write_atomically(argument: str, path: str, text: str) -> None:
    """Write beside the target, then rename: a failed write never leaves half a file."""
    target = Path(path)
    temporary: Path | None = None
    try:
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=target.parent,
                                         prefix=f".{target.name}.", delete=False) as handle:
            temporary = Path(handle.name)
            handle.write(text)
        os.replace(temporary, target)
    except OSError as error:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise CliError(argument, f"cannot write {path}: {error}") from error


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """``plan``'s limits flags (fasdl.contract.limits: the trigger's deadline/budget guards)."""
    parser.add_argument("--budget-usd", type=float, default=None, metavar="USD",
                        help="limits.budget_usd: a run stops before a segment that would "
                             f"pass it (default: the predicted cost x {BUDGET_FACTOR})")
    parser.add_argument("--deadline-slack", type=float, default=DEADLINE_SLACK, metavar="F",
                        help="limits.deadline_s = --deadline x F, 1-100 (default "
                             f"{DEADLINE_SLACK}): a run stops before a segment that would "
                             "end past it")


def limit_options(args: argparse.Namespace) -> dict[str, Any]:
    """The limits flags for planner.commands.planfile.to_plan, checked (CliError names the flag),
    and --deadline against the limit it becomes: called before the search, so that a plan the
    contract would refuse is refused at the door, naming the flag the user typed."""
    if args.budget_usd is not None and not 0 < args.budget_usd <= MAX_BUDGET_USD:
        raise CliError("--budget-usd", f"must be in (0, {MAX_BUDGET_USD:g}], "
                                       f"got {args.budget_usd}")
    if not 1.0 <= args.deadline_slack <= 100.0:
        raise CliError("--deadline-slack", f"must be in [1, 100], got {args.deadline_slack}")
    _check_plan_deadline(args.deadline, args.deadline_slack)
    return {"budget_usd": args.budget_usd, "deadline_slack": args.deadline_slack}


def max_deadline_s(deadline_slack: float = DEADLINE_SLACK) -> float:
    """The largest planning deadline a plan can carry: its guard's limit (the deadline x
    ``deadline_slack``, planner.commands.planfile.to_plan) must stay within a year
    (fasdl.contract.limits). Also the deadline of a problem that wants none binding
    (bench/local_runs.py). Floored to the millisecond, so the value shown is one the contract
    takes."""
    return math.floor(MAX_DEADLINE_S / deadline_slack * 1000.0) / 1000.0


def _check_plan_deadline(deadline_s: float, slack: float) -> None:
    """limits.deadline_s = --deadline x --deadline-slack must fit the contract's year; the
    lower bound is the problem's (planner.model.inputs.problem)."""
    high = max_deadline_s(slack)
    if not 1.0 <= deadline_s <= high:  # NaN fails too
        raise CliError("--deadline", f"must be in [1, {high:.15g}] s: a run stops at --deadline "
                                     f"x --deadline-slack {slack:g}, which may not pass a year "
                                     f"({MAX_DEADLINE_S:.15g} s); got {deadline_s:.15g}")
