"""Turn a search's choice into the plan contract (fasdl.contract.plan.Plan) the stack and trigger
read."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fasdl.contract.lambda_quotas import PlanQuotas
from fasdl.contract.limits import DEADLINE_SLACK, default_limits
from fasdl.contract.plan import Deployment, Plan, Training
from planner.model.confidence import assess
from planner.model.inputs.problem import Problem
from planner.search.prediction import prediction
from planner.search.quotas import Quotas
from planner.search.searches import Choice


def planner_version() -> str:
    try:
        return version("fasdl-cdk")
    except PackageNotFoundError:  # running from a source tree without installing
        return "source"


def to_plan(problem: Problem, choice: Choice, *, search: str, region: str | None = None,
            seed: int = 0, quotas: Quotas | None = None, budget_usd: float | None = None,
            deadline_slack: float = DEADLINE_SLACK) -> Plan:
    """The plan for ``choice``; the segment length is the model's, capped at the run's length,
    and the training recipe the workload's (planner.model.inputs.recipe). ``quotas``, the account
    quotas the search respected, go into the plan's ``quotas`` section."""
    workload = problem.workload.workload
    iterations_per_epoch = workload.samples // choice.global_batch
    total_iterations = max(1, iterations_per_epoch * problem.epochs)
    segment_iterations = max(1, min(choice.segment_iterations, total_iterations))
    return Plan(
        workload=workload,
        deployment=Deployment(
            channel=problem.channel,
            arch=problem.arch,
            memory_mb=choice.memory_mb,
            workers=choice.workers,
            region=region or problem.prices.region,
            timeout_s=int(problem.timeout_s),
        ),
        training=Training(
            aggregators=choice.aggregators,
            batch_aggregator=choice.batch_aggregator,
            batch_non_aggregator=choice.batch_non_aggregator,
            max_global_batch=problem.max_global_batch,
            epochs=problem.epochs,
            segment_iterations=segment_iterations,
            sync=choice.sync,
            seed=seed,
            exchange_chunks=choice.exchange_chunks,
            exchange_dtype=problem.exchange_dtype,
            # S3: the hashed key prefixes the model chose (planner/model/terms/s3_rates.py)
            exchange_key_prefixes=int(choice.breakdown.get("s3_key_prefixes", 1)),
            **problem.workload.recipe.training_fields(
                choice.global_batch, iterations_per_epoch, total_iterations),
        ),
        prediction=prediction(choice, problem),
        quotas=plan_quotas(quotas) if quotas is not None else None,
        # the guards' limits, priced as the plan was (fasdl.contract.limits)
        limits=default_limits(
            planning_deadline_s=problem.deadline_s, predicted_cost_usd=choice.cost_usd,
            lambda_usd_per_gb_s=problem.prices.lambda_mb_s(problem.arch) * 1024.0,
            lambda_usd_per_request=problem.prices.lambda_request, budget_usd=budget_usd,
            deadline_slack=deadline_slack),
        provenance={
            "planner": planner_version(),
            "search": search,
            "pattern": choice.pattern,
            "workload_profile": problem.workload.name,
            "platform_profile": problem.platform.name,
            "prices": problem.prices.region,
            "deadline_s": f"{problem.deadline_s:g}",
        },
    )


def plan_quotas(quotas: Quotas) -> PlanQuotas:
    """The quotas the search kept to, and what ``--account`` read, for the stack's checks."""
    account = quotas.account
    return PlanQuotas(
        max_concurrency=quotas.max_concurrency, max_memory_mb=quotas.max_memory_mb,
        account_max_memory_mb=account.max_memory_mb if account is not None else None,
        account_max_concurrency=account.max_concurrency if account is not None else None,
        account=(f"{account.account_id} {account.region} {account.read_on}"
                 if account is not None else None))


def confidence_section(problem: Problem, choice: Choice) -> dict[str, Any]:
    """How far the plan's prediction can be trusted (planner/model/confidence.py)."""
    return assess(problem, choice).to_dict()


def plan_json(problem: Problem, choice: Choice, plan: Plan) -> str:
    """The plan file ``--out`` writes: the contract's fields (Plan.to_json's layout) and the
    ``confidence`` section, which the contract reads and drops."""
    document = {**plan.to_dict(), "confidence": confidence_section(problem, choice)}
    return json.dumps(document, indent=2) + "\n"
