"""Lambda's VPC errors through the synthesized state machine (moto's ASL interpreter, the local
adapter's rendering of an Invoke API error, the emulator's service-error kinds): EC2 throttling
is retried and the run goes on; subnets out of IP addresses fail the run with that AWS name,
and failure.json says what to do. Stub Lambdas (tests/infra/test_workflow_moto.py): seconds.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from fasdl.contract.errors import VPC_FAILURE_ADVICE
from fasdl.contract.settings import Settings
from fasdl.run import results
from infra import lambda_errors, workflow
from local.aws.adapter import LocalStepFunctions, service_error_response
from local.faults.service_faults import KINDS, ServiceError, ServiceErrorKind
from tests.infra.conftest import Synth, state_machine_definition
from tests.infra.moto_workflow import FakeLambdas

BUCKET = "results"


def injecting(fake: FakeLambdas, faults: dict[str, deque[ServiceErrorKind]],
              refused: list[str]) -> Callable[[str, bytes], tuple[bytes, str | None]]:
    """A router: the next faults of a role (Worker, Trigger, Finalize) are refused as the
    Invoke API refuses them (nothing runs; their names go to ``refused``); every other call
    goes to ``fake``."""
    lock = threading.Lock()

    def route(function: str, payload: bytes) -> tuple[bytes, str | None]:
        role = next(r for r in ("Trigger", "Worker", "Finalize") if r in function)
        with lock:
            queue = faults.get(role)
            kind = queue.popleft() if queue else None
            if kind is not None:
                refused.append(kind.name)
        if kind is not None:
            return service_error_response(kind.name, ServiceError(kind, str(uuid.uuid4())).cause)
        return json.dumps(fake(function, json.loads(payload))).encode(), None

    return route


def _execute(synth: Synth, fake: FakeLambdas, worker_fault: str
             ) -> tuple[dict[str, Any], list[str]]:
    """One execution whose first worker invocation is refused with ``worker_fault``; the
    execution (with ``failure``: the failure.json finalize writes, when it failed) and the
    names of the refused invocations."""
    refused: list[str] = []
    route = injecting(fake, {"Worker": deque([KINDS[worker_fault]])}, refused)
    with LocalStepFunctions(route) as sfn:
        machine = sfn.create(workflow.state_machine_name("FasdlStack"),
                             state_machine_definition(synth))
        sfn.start(machine, "vpc", {"run_id": "vpc"})
        (execution,) = sfn.wait(machine, timeout_s=120, poll_s=0.05)
        if execution["status"] == "FAILED":  # what finalize's failed action writes
            (event,) = [e for action, e in fake.calls if action == "Finalize.failed"]
            s3 = boto3.client("s3", region_name="us-east-1")
            s3.create_bucket(Bucket=BUCKET)
            settings = Settings(stack="FasdlStack", channel="s3", deployment="",
                                datasets_bucket="datasets", results_bucket=BUCKET,
                                exchange_bucket="exchange")
            _, key = results.write_failure(s3, settings, event["state"], execution["executionArn"])
            execution["failure"] = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    return execution, refused


def test_ec2_throttling_is_retried(s3_synth: Synth) -> None:
    fake = FakeLambdas(4)
    execution, refused = _execute(s3_synth, fake, "ec2-throttled")
    assert execution["status"] == "SUCCEEDED", execution
    assert refused == [lambda_errors.EC2_THROTTLED]
    assert fake.actions()[-1] == "Finalize.succeeded"
    # every worker of every segment trained, the refused one on its retry
    trained = [e["worker"] for action, e in fake.calls if action == "Worker.train"]
    assert sorted(set(trained)) == [0, 1, 2, 3] and len(trained) == 4 * 3


def test_subnets_out_of_addresses_fail_the_run_with_the_name(s3_synth: Synth) -> None:
    fake = FakeLambdas(4)
    execution, refused = _execute(s3_synth, fake, "subnet-ip-limit")
    assert execution["status"] == "FAILED" and execution["error"] == workflow.RUN_FAILED_ERROR
    assert refused == [lambda_errors.SUBNET_IP_LIMIT]
    # not retried: the Map failed with it at once, no segment retry, no second attempt
    assert fake.actions() == ["Trigger.start", "Finalize.failed"]
    assert len([a for a, _ in fake.calls if a == "Worker.train"]) <= 3
    failure = execution["failure"]
    assert failure["error"] == lambda_errors.SUBNET_IP_LIMIT
    assert "no available IP addresses" in json.loads(failure["cause"])["errorMessage"]
    assert failure["advice"] == VPC_FAILURE_ADVICE[lambda_errors.SUBNET_IP_LIMIT]
    assert "larger subnets" in failure["advice"] and "fewer workers" in failure["advice"]


@pytest.mark.parametrize("name", lambda_errors.VPC_TRANSIENT)
def test_the_workflow_retries_the_transient_vpc_errors(s3_synth: Synth, name: str) -> None:
    """Every Lambda task of the machine retries them; none retries the others."""
    definition = state_machine_definition(s3_synth)
    retried: set[str] = set()
    for state in _tasks(definition):
        names = {error for rule in state.get("Retry", []) for error in rule["ErrorEquals"]}
        assert name in names and not names & set(lambda_errors.VPC_FAILURES), state
        retried |= names
    assert retried


def _tasks(definition: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for state in definition["States"].values():
        if state["Type"] == "Task" and "lambda" in json.dumps(state.get("Resource", "")):
            found.append(state)
        for nested in ("ItemProcessor", "Iterator"):
            if nested in state:
                found += _tasks(state[nested])
    return found
