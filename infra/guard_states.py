"""Where a run goes when a deadline or budget guard stops it (fasdl.run.guards)::

    Plan next segment --DeadlineExceeded/BudgetExceeded--> Record stop -> Which limit?
        --> Deadline exceeded (Fail, error DEADLINE_EXCEEDED)
        --> Budget exceeded (Fail, error BUDGET_EXCEEDED)

``Record stop`` is finalize's ``failed`` action, which for these errors also writes the kept
checkpoint and the resume command into ``failure.json`` (fasdl.run.run_record). Each Fail
state's cause is the trigger's message (what was measured, what was projected, which limit).
A Catch's ``ErrorEquals`` names the error type the Lambda function raised
(https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html), here
the exception's class name; ``CausePath`` takes the cause from the state's input
(https://docs.aws.amazon.com/step-functions/latest/dg/state-fail.html).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from fasdl.contract.limits import GUARD_STATUSES

RECORD_STOP = "Record stop"
WHICH_LIMIT = "Which limit?"
GUARD_ERRORS = tuple(GUARD_STATUSES)  # what the trigger raises: DeadlineExceeded, ...
STOP_STATE_NAMES = {"DEADLINE_EXCEEDED": "Deadline exceeded",
                    "BUDGET_EXCEEDED": "Budget exceeded"}
ERROR_PATH = "$.error"


def guard_stop(scope: Construct, *, record: Callable[[str], tasks.LambdaInvoke],
               failed: sfn.IChainable, failure_errors: Sequence[str]) -> sfn.IChainable:
    """``Record stop`` (``record(name)`` builds finalize's failed-action task) then a Fail per
    status; a failure to record goes to ``failed`` like any other."""
    task = record(RECORD_STOP)
    for error in failure_errors:
        task.add_catch(failed, errors=[error], result_path="$.record_error")
    which = sfn.Choice(scope, WHICH_LIMIT, state_name=WHICH_LIMIT)
    for raised, status in GUARD_STATUSES.items():
        name = STOP_STATE_NAMES[status]
        which.when(sfn.Condition.string_equals(f"{ERROR_PATH}.Error", raised),
                   sfn.Fail(scope, name, state_name=name, error=status,
                            cause_path=sfn.JsonPath.string_at(f"{ERROR_PATH}.Cause")))
    # The catch names only the guard errors, so nothing else reaches here; a stray error
    # still ends failed rather than looking like a guard.
    which.otherwise(failed)
    return task.next(which)


def catch_guards(state: tasks.LambdaInvoke, stop: sfn.IChainable) -> None:
    """``state``'s guard errors go to ``stop``; add before the catch-all (the order counts)."""
    state.add_catch(stop, errors=list(GUARD_ERRORS), result_path=ERROR_PATH)
