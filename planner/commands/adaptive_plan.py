"""``planner plan --adaptive POLICY [--workers-max N]``: a plan whose run re-plans itself at
segment boundaries (issue 42; docs/user-guide.md, "Adaptive runs").

The search is the same; the plan records the policy (``training.adaptive``, ``deadline`` unless
``--adaptive off``) and the ceiling the stack is sized for (``deployment.workers_max``, at least
the chosen W and at most half the concurrency the plan was made for: a retried segment overlaps
its aborted one; by default twice the chosen W within that, :data:`DEFAULT_CEILING_FACTOR`, and
within what the worker's reserved concurrency can hold, Lambda keeping 100 unreserved).
With ``--out`` the profiles the plan was made with go beside it (``plan.profiles.json``,
fasdl.contract.training), which the synth ships with the re-plan function.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from fasdl.contract.lambda_quotas import EXECUTIONS_PER_WORKER, MIN_UNRESERVED_CONCURRENCY
from fasdl.contract.plan import MAX_WORKERS, Plan
from fasdl.contract.training import ADAPTIVE_POLICIES
from planner.adapt import profiles_file
from planner.commands.cli_inputs import CliError, write_atomically
from planner.model.inputs.problem import Problem
from planner.search.quotas import Quotas

DEFAULT_POLICY = "deadline"  # the issue's: change only when the run would miss a limit
# a run slower than planned mostly needs more workers: room for them costs nothing unused
# (the reserved concurrency and the cache's maxima are limits; its billed minimum is the plan's)
DEFAULT_CEILING_FACTOR = 2


def add_adaptive_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adaptive", choices=ADAPTIVE_POLICIES, default=DEFAULT_POLICY,
                        help="re-plan between segments: deadline (default; change only when "
                             "the run as measured would miss the deadline or budget), cost "
                             "(also scale in when a cheaper configuration keeps the deadline), "
                             "off (keep the plan and stop at a guard limit)")
    parser.add_argument("--workers-max", type=int, default=None,
                        help="an adaptive plan's most workers a re-plan may use (the stack is "
                             f"sized for them; default {DEFAULT_CEILING_FACTOR}x the chosen W "
                             "within the concurrency quota)")


def adaptive_plan(plan: Plan, args: argparse.Namespace, quotas: Quotas) -> Plan:
    """``plan`` with the policy and ceiling of ``--adaptive``/``--workers-max``."""
    ceiling = args.workers_max
    if args.adaptive == "off":
        if ceiling is not None:
            raise CliError("--workers-max", "sizes the stack for an adaptive run; drop "
                                            "--adaptive off or --workers-max")
        return plan
    workers = plan.deployment.workers
    most = min(quotas.max_concurrency // EXECUTIONS_PER_WORKER, MAX_WORKERS)
    if ceiling is None:  # within what -c reserve_concurrency=true can reserve too
        reservable = (quotas.max_concurrency - MIN_UNRESERVED_CONCURRENCY) // EXECUTIONS_PER_WORKER
        ceiling = max(workers, min(DEFAULT_CEILING_FACTOR * workers, most, reservable))
    elif not workers <= ceiling <= most:
        raise CliError("--workers-max", f"must be in [{workers}, {most}] (the chosen W, and "
                                        f"half the concurrency {quotas.max_concurrency} the "
                                        f"plan is made for), got {ceiling}")
    return dataclasses.replace(
        plan, training=dataclasses.replace(plan.training, adaptive=args.adaptive),
        deployment=dataclasses.replace(plan.deployment, workers_max=ceiling))


def write_profiles(plan: Plan, out: str, problem: Problem) -> str | None:
    """An adaptive plan's profiles beside ``out``; the path written, or None (static)."""
    path = profiles_file.write_profiles(
        plan, Path(out), (problem.workload, problem.platform, problem.prices),
        write=lambda target, text: write_atomically("--out", str(target), text))
    return None if path is None else str(path)


def describe_adaptive(plan: Plan, out: str | None) -> str:
    """One line on what the run does when it drifts from the plan."""
    policy = plan.training.adaptive
    if policy == "off":
        return ("static run (--adaptive off): the plan is kept; a run that would pass the "
                "deadline or budget stops before the segment that would")
    line = (f"adaptive run ({policy}): between segments it refits itself and may re-plan W "
            f"(1-{plan.deployment.ceiling}), K and the batches at the planned global batch; "
            "--adaptive off keeps the plan")
    if out is None:
        line += "; without --out no profiles file is written, and synth refuses the plan"
    return line
