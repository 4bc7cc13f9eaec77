"""fasdl/aws/account.py against botocore's Stubber: every request and response is validated against
the real Lambda service model (field names, enums), so the logic reads what AWS returns."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber

from fasdl.aws import account
from fasdl.aws.account import (
    ConcurrencyQuotaTooLow,
    WorkerFunctionFailed,
    check_concurrency,
    wait_until_active,
)
from fasdl.contract import lambda_quotas
from fasdl.contract.errors import WorkerNotReady
from planner.search import quotas
from tests.runtime.conftest import offline_client

WORKER = "FasdlStack-ComputeWorker1234"


@pytest.fixture
def client() -> Any:
    return offline_client("lambda")


def _settings(limit: int, unreserved: int) -> dict[str, Any]:
    return {"AccountLimit": {"TotalCodeSize": 80530636800, "CodeSizeUnzipped": 262144000,
                             "CodeSizeZipped": 52428800, "ConcurrentExecutions": limit,
                             "UnreservedConcurrentExecutions": unreserved},
            "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 5}}


def _concurrency(stub: Stubber, limit: int, unreserved: int, reserved: int | None) -> None:
    stub.add_response("get_account_settings", _settings(limit, unreserved), {})
    stub.add_response("get_function_concurrency",
                      {} if reserved is None else {"ReservedConcurrentExecutions": reserved},
                      {"FunctionName": WORKER})


def _state(stub: Stubber, state: str, code: str | None = None, reason: str = "") -> None:
    configuration: dict[str, Any] = {"FunctionName": WORKER, "State": state,
                                     "LastUpdateStatus": "Successful"}
    if code:
        configuration.update(StateReasonCode=code, StateReason=reason)
    stub.add_response("get_function_configuration", configuration, {"FunctionName": WORKER})


class Clock:
    """A fake monotonic clock that sleep() advances."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_the_constants_are_the_planners() -> None:
    # the functions bundle has no planner: the planner reuses these (one definition)
    assert quotas.DEFAULT_MAX_CONCURRENCY is lambda_quotas.DEFAULT_ACCOUNT_CONCURRENCY
    assert quotas.Quotas(max_concurrency=9).max_workers == 9 // lambda_quotas.EXECUTIONS_PER_WORKER


def test_unreserved_pool_of_2w_is_enough(client: Any, stub: Stubber) -> None:
    _concurrency(stub, limit=1000, unreserved=8, reserved=None)
    found = check_concurrency(client, WORKER, workers=4)
    assert (found.needed, found.available, found.reserved) == (8, 8, None)


def test_too_little_unreserved_names_the_quota_and_numbers(client: Any, stub: Stubber) -> None:
    _concurrency(stub, limit=7, unreserved=7, reserved=None)
    with pytest.raises(ConcurrencyQuotaTooLow) as raised:
        check_concurrency(client, WORKER, workers=4)
    message = str(raised.value)
    for text in ("W=4", "2 x W = 8", "can use 7", "'Concurrent executions' = 7", "L-B99A9384",
                 "--desired-value 8", "--max-concurrency 7", "W <= 3", WORKER):
        assert text in message, (text, message)


def test_other_reservations_raise_the_desired_quota(client: Any, stub: Stubber) -> None:
    # 1000 in the account, 995 reserved by other functions: 5 left, 8 needed -> ask for 1003
    _concurrency(stub, limit=1000, unreserved=5, reserved=None)
    with pytest.raises(ConcurrencyQuotaTooLow, match="--desired-value 1003"):
        check_concurrency(client, WORKER, workers=4)


def test_reserved_concurrency_is_what_the_worker_gets(client: Any, stub: Stubber) -> None:
    # plenty unreserved does not help a worker held to its own reservation
    _concurrency(stub, limit=1000, unreserved=900, reserved=6)
    with pytest.raises(ConcurrencyQuotaTooLow) as raised:
        check_concurrency(client, WORKER, workers=4)
    assert "reserved concurrency" in str(raised.value)
    assert "--reserved-concurrent-executions 8" in str(raised.value)
    _concurrency(stub, limit=1000, unreserved=0, reserved=8)
    assert check_concurrency(client, WORKER, workers=4).available == 8


def test_active_returns_at_once(client: Any, stub: Stubber) -> None:
    _state(stub, "Active")
    clock = Clock()
    waited = wait_until_active(client, WORKER, budget_s=90, sleep=clock.sleep, clock=clock)
    assert (waited.polls, waited.woke, clock.slept) == (1, "", [])


def test_pending_is_polled_until_active(client: Any, stub: Stubber) -> None:
    for _ in range(3):
        _state(stub, "Pending", "Creating", "The function is being created.")
    _state(stub, "Active")
    clock = Clock()
    waited = wait_until_active(client, WORKER, budget_s=90, sleep=clock.sleep, clock=clock)
    assert waited.polls == 4 and clock.slept == [account.POLL_S] * 3
    assert waited.state.state == "Active" and waited.woke == ""  # Pending is never invoked


def test_pending_past_the_budget_is_worker_not_ready(client: Any, stub: Stubber) -> None:
    for _ in range(3):
        _state(stub, "Pending", "Restoring", "The function is being restored.")
    clock = Clock()
    with pytest.raises(WorkerNotReady) as raised:
        wait_until_active(client, WORKER, budget_s=12, sleep=clock.sleep, clock=clock)
    assert "State Pending (Restoring: The function is being restored.)" in str(raised.value)
    assert clock.now <= 12 and type(raised.value).__name__ == "WorkerNotReady"


def test_inactive_is_woken_once_by_an_invoke(client: Any, stub: Stubber) -> None:
    _state(stub, "Inactive", "Idle", "The function is idle.")
    stub.add_client_error(
        "invoke", service_error_code="ResourceNotReadyException", http_status_code=502,
        service_message="The function is inactive and its VPC connection is no longer "
                        "available.",
        expected_params={"FunctionName": WORKER, "Payload": account.WAKE_EVENT})
    _state(stub, "Pending", "Restoring", "The function is being restored.")
    _state(stub, "Active")
    clock = Clock()
    waited = wait_until_active(client, WORKER, budget_s=90, sleep=clock.sleep, clock=clock)
    assert waited.woke == "ResourceNotReadyException" and waited.polls == 3


def test_failed_is_a_clean_failure_with_the_reason(client: Any, stub: Stubber) -> None:
    _state(stub, "Failed", "SubnetOutOfIPAddresses", "All subnets are out of IP addresses.")
    clock = Clock()
    with pytest.raises(WorkerFunctionFailed) as raised:
        wait_until_active(client, WORKER, budget_s=90, sleep=clock.sleep, clock=clock)
    assert "SubnetOutOfIPAddresses: All subnets are out of IP addresses." in str(raised.value)
    assert clock.slept == []


def test_no_worker_function_in_the_environment_checks_nothing() -> None:
    assert account.before_first_map(4, None, "") is None


def test_time_left_comes_from_the_lambda_context() -> None:
    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return 61_500

    assert account.seconds_left(Context()) == 61.5
    assert account.seconds_left(None) == account.MAX_WAIT_S + account.KEEP_S
