"""The local Lambda control plane over real HTTP, read by boto3's own lambda client (the same
client and parser the trigger uses) and by fasdl/aws/account.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from fasdl.aws import account
from fasdl.aws.account import ConcurrencyQuotaTooLow, WorkerFunctionFailed
from fasdl.contract.errors import WorkerNotReady
from local.aws.control_plane import (
    AccountOptions,
    ControlPlane,
    WorkerFunction,
    parse_account,
)
from local.aws.template import FunctionResource, LocalTemplate
from local.faults.injection import InputError

WORKER = "ComputeWorker1A2B3C4D"


def _client(endpoint: str) -> Any:
    return boto3.client("lambda", region_name="us-east-1", endpoint_url=endpoint,
                        aws_access_key_id="x", aws_secret_access_key="y",
                        config=Config(retries={"total_max_attempts": 1}))


@pytest.fixture
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    options, reserved = getattr(request, "param", (AccountOptions(), None))
    with ControlPlane(WorkerFunction(WORKER, options, reserved)) as started:
        yield started


def _wait(plane: ControlPlane, budget_s: float = 60) -> account.Waited:
    client = _client(plane.endpoint_url)
    return account.wait_until_active(client, WORKER, budget_s=budget_s, sleep=lambda s: None)


@pytest.mark.parametrize("plane", [(AccountOptions(concurrency=7), None)], indirect=True)
def test_account_settings_and_an_unreserved_worker(plane: ControlPlane) -> None:
    client = _client(plane.endpoint_url)
    limit = client.get_account_settings()["AccountLimit"]
    assert (limit["ConcurrentExecutions"], limit["UnreservedConcurrentExecutions"]) == (7, 7)
    assert "ReservedConcurrentExecutions" not in client.get_function_concurrency(
        FunctionName=WORKER)
    with pytest.raises(ConcurrencyQuotaTooLow, match=r"2 x W = 8 .* can use 7"):
        account.check_concurrency(client, WORKER, workers=4)
    assert account.check_concurrency(client, WORKER, workers=3).available == 7


@pytest.mark.parametrize("plane", [(AccountOptions(concurrency=300), 8)], indirect=True)
def test_a_reserved_worker_takes_from_the_unreserved_pool(plane: ControlPlane) -> None:
    client = _client(plane.endpoint_url)
    assert client.get_account_settings()["AccountLimit"]["UnreservedConcurrentExecutions"] \
        == 292
    arn = f"arn:aws:lambda:us-east-1:123456789012:function:{WORKER}"  # ARNs work too
    assert client.get_function_concurrency(FunctionName=arn)[
        "ReservedConcurrentExecutions"] == 8
    assert account.check_concurrency(client, WORKER, workers=4).reserved == 8


def test_unknown_functions_are_not_found(plane: ControlPlane) -> None:
    client = _client(plane.endpoint_url)
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.get_function_configuration(FunctionName="Other")


@pytest.mark.parametrize("plane", [(AccountOptions(worker_state="Pending", polls=3), None)],
                         indirect=True)
def test_pending_for_three_polls(plane: ControlPlane) -> None:
    client = _client(plane.endpoint_url)
    with pytest.raises(client.exceptions.ResourceConflictException,
                       match="currently in the following state: Pending"):
        client.invoke(FunctionName=WORKER, Payload=b"{}")
    waited = _wait(plane)
    assert waited.polls == 4 and waited.woke == ""


@pytest.mark.parametrize("plane", [(AccountOptions(worker_state="Inactive", polls=2), None)],
                         indirect=True)
def test_inactive_until_an_invoke_wakes_it(plane: ControlPlane) -> None:
    client = _client(plane.endpoint_url)
    assert client.get_function_configuration(FunctionName=WORKER)["StateReasonCode"] == "Idle"
    waited = _wait(plane)
    # the waking invoke is refused as AWS refuses it, then 2 Pending polls, then Active
    assert waited.woke == "ResourceNotReadyException" and waited.polls == 4


@pytest.mark.parametrize("plane", [(AccountOptions(worker_state="Inactive"), None)],
                         indirect=True)
def test_a_budget_too_short_is_worker_not_ready(plane: ControlPlane) -> None:
    with pytest.raises(WorkerNotReady, match=r"State Inactive \(Idle: .*answered ResourceNotReady"):
        _wait(plane, budget_s=1)


@pytest.mark.parametrize("plane", [(AccountOptions(worker_state="Failed"), None)],
                         indirect=True)
def test_failed_names_the_reason(plane: ControlPlane) -> None:
    with pytest.raises(WorkerFunctionFailed, match="SubnetOutOfIPAddresses"):
        _wait(plane)


def test_options_parse_with_clear_errors() -> None:
    assert parse_account(8, "pending:3") == AccountOptions(8, "Pending", 3)
    assert parse_account(1000, "inactive") == AccountOptions(1000, "Inactive", 2)
    assert parse_account(1000, "failed") == AccountOptions(1000, "Failed", 0)
    for bad in ("asleep", "pending:", "pending:-1", "active:2", "failed:1"):
        with pytest.raises(InputError, match="--worker-state"):
            parse_account(1000, bad)
    with pytest.raises(InputError, match="--account-concurrency must be >= 1"):
        parse_account(0, "active")


def test_a_reservation_the_account_cannot_hold_is_bad_input(tmp_path: Path) -> None:
    worker = FunctionResource(logical_id=WORKER, handler="handlers.worker.handler",
                              timeout_s=300, memory_mb=1024, environment={}, code_dir=tmp_path,
                              runtime="python3.12", reserved_concurrency=8)
    template = LocalTemplate(path=tmp_path, region="us-east-1", state_machine_name="m",
                             definition={}, functions={WORKER: worker})
    assert WorkerFunction.of(template, AccountOptions(concurrency=108),
                             "handlers.worker").reserved == 8
    with pytest.raises(InputError, match=r"reserves 8 .* at least 108"):
        WorkerFunction.of(template, AccountOptions(concurrency=107), "handlers.worker")
