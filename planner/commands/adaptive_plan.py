"""``planner plan --adaptive POLICY [--workers-max N]``: a plan whose run re-plans itself at
segment boundaries (issue 42; docs/user-guide.md, "Adaptive runs").

The search is the same; the plan records the policy (``training.adaptive``) and the ceiling the
stack is sized for (``deployment.workers_max``, at least the chosen W and at most half the
concurrency the plan was made for: a retried segment overlaps its aborted one). With ``--out``
the profiles the plan was made with go beside it (``plan.profiles.json``,
fasdl.contract.training), which the synth ships with the re-plan function.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from fasdl.contract.lambda_quotas import EXECUTIONS_PER_WORKER
from fasdl.contract.plan import Plan
from fasdl.contract.training import ADAPTIVE_POLICIES
from planner.adapt import profiles_file
from planner.commands.cli_inputs import CliError, write_atomically
from planner.model.inputs.problem import Problem
from planner.search.quotas import Quotas


def add_adaptive_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adaptive", choices=ADAPTIVE_POLICIES, default="off",
                        help="re-plan between segments: off (default; keep the plan and stop "
                             "at a guard limit), deadline (change only when the run as "
                             "measured would miss the deadline or budget), cost (also scale "
                             "in when a cheaper configuration keeps the deadline)")
    parser.add_argument("--workers-max", type=int, default=None,
                        help="with --adaptive: the most workers a re-plan may use (the stack "
                             "is sized for them; default the chosen W)")


def adaptive_plan(plan: Plan, args: argparse.Namespace, quotas: Quotas) -> Plan:
    """``plan`` with the policy and ceiling of ``--adaptive``/``--workers-max``."""
    ceiling = args.workers_max
    if args.adaptive == "off":
        if ceiling is not None:
            raise CliError("--workers-max", "sizes the stack for an adaptive run; pass "
                                            "--adaptive deadline or cost with it")
        return plan
    workers = plan.deployment.workers
    most = quotas.max_concurrency // EXECUTIONS_PER_WORKER
    if ceiling is not None and not workers <= ceiling <= most:
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
