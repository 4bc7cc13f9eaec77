"""The plan's ``limits`` section: the wall-clock deadline and the budget a run must keep, and
the Lambda prices the guard measures spending with (fasdl.run.guards checks them between
segments; the planner writes them, ``planner plan --budget-usd X --deadline-slack F``).

Defaults (:func:`default_limits`): the planning deadline x :data:`DEADLINE_SLACK` and the
predicted cost x :data:`BUDGET_FACTOR`. The prices are the planner's list prices for the
plan's region and arch (https://aws.amazon.com/lambda/pricing/: per GB-second of duration,
per request), so a run is measured in the same currency it was planned in.

A run that would pass a limit stops cleanly before the segment that would pass it: the
trigger raises :class:`DeadlineExceeded` or :class:`BudgetExceeded` (the state machine
catches them by name, infra/guard_states.py) and the run ends in a failed state whose error
is the status :data:`DEADLINE_EXCEEDED` or :data:`BUDGET_EXCEEDED`. Pure Python (imported by
Lambda, the planner and the CDK app).
"""

from __future__ import annotations

from dataclasses import dataclass

from fasdl.contract.fields import require_float

DEADLINE_SLACK = 1.25  # default limits.deadline_s: the planning deadline x this
BUDGET_FACTOR = 1.5  # default limits.budget_usd: the predicted cost x this
MAX_DEADLINE_S = 365 * 24 * 3600.0  # a Standard execution lives at most a year
MAX_BUDGET_USD = 1e9
MAX_UNIT_PRICE_USD = 1.0  # per GB-second or per request: far above any AWS list price

# The run's final status when a guard stops it: the Fail state's error (infra/guard_states.py)
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
BUDGET_EXCEEDED = "BUDGET_EXCEEDED"


class DeadlineExceeded(RuntimeError):
    """The next segment would end past ``limits.deadline_s``: the run stops before it."""


class BudgetExceeded(RuntimeError):
    """The next segment would take spending past ``limits.budget_usd``: the run stops."""


# Lambda error type (the exception's class name) -> the run's status
GUARD_STATUSES: dict[str, str] = {DeadlineExceeded.__name__: DEADLINE_EXCEEDED,
                                  BudgetExceeded.__name__: BUDGET_EXCEEDED}


@dataclass(frozen=True)
class Limits:
    """What a run may take: wall-clock seconds from its start, and USD."""

    deadline_s: float
    budget_usd: float
    lambda_usd_per_gb_s: float  # the plan's region and arch
    lambda_usd_per_request: float

    def validate(self) -> None:
        require_float("limits.deadline_s", self.deadline_s, 0.0, MAX_DEADLINE_S, open_low=True)
        require_float("limits.budget_usd", self.budget_usd, 0.0, MAX_BUDGET_USD, open_low=True)
        require_float("limits.lambda_usd_per_gb_s", self.lambda_usd_per_gb_s, 0.0,
                      MAX_UNIT_PRICE_USD)
        require_float("limits.lambda_usd_per_request", self.lambda_usd_per_request, 0.0,
                      MAX_UNIT_PRICE_USD)


def default_limits(*, planning_deadline_s: float, predicted_cost_usd: float,
                   lambda_usd_per_gb_s: float, lambda_usd_per_request: float,
                   budget_usd: float | None = None,
                   deadline_slack: float = DEADLINE_SLACK) -> Limits:
    """The plan's limits: ``budget_usd`` or the predicted cost x :data:`BUDGET_FACTOR`, and
    the planning deadline x ``deadline_slack`` (>= 1: a guard tighter than the deadline the
    plan was chosen for would stop runs the plan promised)."""
    require_float("--deadline-slack", deadline_slack, 1.0, 100.0)
    limits = Limits(
        deadline_s=round(planning_deadline_s * deadline_slack, 3),
        budget_usd=(budget_usd if budget_usd is not None  # a free plan still gets a budget
                    else max(round(predicted_cost_usd * BUDGET_FACTOR, 6), 1e-6)),
        lambda_usd_per_gb_s=lambda_usd_per_gb_s, lambda_usd_per_request=lambda_usd_per_request)
    limits.validate()
    return limits
