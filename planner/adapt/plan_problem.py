"""The planning problem a plan was made from, rebuilt from the plan and the profiles it was made
with (issue 42): what a re-plan at a segment boundary starts from.

The plan carries what the planner chose and the typed fields the run acts on, not its inputs'
coefficients (it rides in the trigger's environment, 4 KB in all), so the profiles come beside
it. From the plan: the workload section (its sizes, as the run uses them), epochs, the global
batch cap, the function timeout, the channel and arch, the exchange's chunks and dtype, the
cache's start (a plan that charged a ramp or a wait was made for a fresh cache) and, as the
deadline, the run's guard (``limits.deadline_s``: what the run must keep), and as the most
iterations a segment holds, the plan's segment length (a change never checkpoints less often
than planned). Not in a plan, so
the planner's defaults: the timeout margin (``default_timeout_margin``), the batch step and the
search's memory grid (a re-plan keeps the deployed M).
"""

from __future__ import annotations

from dataclasses import replace

from fasdl.contract.plan import Plan
from planner.adapt.replan import Configuration, ReplanError
from planner.model.inputs.problem import ModelInputError, Problem, default_timeout_margin
from planner.model.inputs.profiles import PlatformProfile, Prices, WorkloadProfile


def configuration_of(plan: Plan) -> Configuration:
    """The plan's (W, K, B^a, B^n)."""
    training = plan.training
    return Configuration(plan.deployment.workers, training.aggregators,
                         training.batch_aggregator, training.batch_non_aggregator)


def _segment_ceiling(plan: Plan) -> int | None:
    """The plan's segment length as a ceiling; None for a plan of one segment (the model counts
    fractional iterations, and one segment has no checkpoint cadence to keep)."""
    length = plan.training.segment_iterations
    return length if length < plan.total_iterations else None


def problem_of(plan: Plan, workload: WorkloadProfile, platform: PlatformProfile,
               prices: Prices) -> Problem:
    """The problem ``plan`` solves (module docstring); the profiles must be the plan's
    workload's and for its channel and arch, the prices its region's."""
    deployment = plan.deployment
    if workload.workload.name != plan.workload.name:
        raise ReplanError(f"workload profile: is for {workload.workload.name!r}, the plan "
                          f"trains {plan.workload.name!r}")
    if (platform.channel, platform.arch) != (deployment.channel, deployment.arch):
        raise ReplanError(f"platform profile: is for {platform.channel}/{platform.arch}, the "
                          f"plan runs on {deployment.channel}/{deployment.arch}")
    if prices.region != deployment.region:
        raise ReplanError(f"prices: are for {prices.region}, the plan deploys to "
                          f"{deployment.region}")
    if plan.limits is None:
        raise ReplanError("limits: a plan without limits has no deadline to re-plan for")
    prediction = plan.prediction
    fresh_cache = prediction is not None and bool(prediction.cache_ramp_s
                                                  or prediction.cache_wait_s)
    try:
        return Problem(
            workload=replace(workload, workload=plan.workload), platform=platform,
            prices=prices, epochs=plan.training.epochs, deadline_s=plan.limits.deadline_s,
            max_global_batch=plan.training.max_global_batch,
            timeout_s=float(deployment.timeout_s),
            timeout_margin_s=default_timeout_margin(deployment.timeout_s),
            exchange_chunks=plan.training.exchange_chunks,
            exchange_dtype=plan.training.exchange_dtype, cache_warm=not fresh_cache,
            segment_iterations_max=_segment_ceiling(plan))
    except ModelInputError as error:
        raise ReplanError(f"the plan's problem: {error}") from error
