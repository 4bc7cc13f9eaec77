"""One run id is one run (issue 41): a second execution's start with a taken run id is refused
with RunExists naming the owner, and writes nothing; the owner's own retried start goes on."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fasdl.contract.errors import RunExists
from fasdl.contract.plan import Plan, PlanError
from fasdl.contract.run_owner import RunOwner
from tests.lambda_context import FakeLambdaContext
from tests.runtime.conftest import DATASETS, EXCHANGE, RESULTS, deployed_env
from tests.runtime.kreduce_helpers import make_plan

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
if str(FUNCTIONS) not in sys.path:  # handlers/ is the Lambda asset root, not a package
    sys.path.insert(0, str(FUNCTIONS))

from handlers import finalize, trigger  # noqa: E402

PLAN = make_plan(4, 2, 2, 3, "hap", samples=100)
RUN_OBJECTS = ("plan.json", "partitions.json", "fence.json")


def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


@pytest.fixture
def s3_env() -> dict[str, str]:
    return deployed_env(PLAN)


@pytest.fixture
def s3_objects() -> dict[tuple[str, str], bytes]:
    prefix = PLAN.workload.dataset
    return {(DATASETS, f"{prefix}/x.npy"): _npy(np.zeros((100, 1, 4, 4), np.uint8)),
            (DATASETS, f"{prefix}/y.npy"): _npy(np.arange(100, dtype=np.int64) % 3)}


STARTED = "2026-08-01T09:00:00.000Z"  # $$.Execution.StartTime of the tests' executions


def start(event_input: dict[str, Any], execution: str,
          started: str = STARTED) -> dict[str, Any]:
    return trigger.handler({"action": "start", "input": event_input, "execution": execution,
                            "execution_started": started}, FakeLambdaContext())


def run_objects(s3: Any, run_id: str) -> dict[str, bytes]:
    listing = s3.list_objects_v2(Bucket=RESULTS, Prefix=f"runs/{run_id}/")
    return {item["Key"]: s3.get_object(Bucket=RESULTS, Key=item["Key"])["Body"].read()
            for item in listing.get("Contents", [])}


def test_a_second_execution_is_refused_naming_the_owner_and_touches_nothing(s3: Any) -> None:
    first = start({"run_id": "taken", "epochs": 2}, "owner-exec")
    before = run_objects(s3, "taken")
    assert sorted(key.rsplit("/", 1)[1] for key in before) == sorted(RUN_OBJECTS)
    with pytest.raises(RunExists, match=r"'taken'.*execution 'owner-exec'"):
        start({"run_id": "taken", "epochs": 3}, "second-exec")
    assert run_objects(s3, "taken") == before  # byte for byte: plan, partitions, fence
    assert first["segment"]["epoch"] == 1


def test_the_owners_retried_start_goes_on_with_its_own_plan(s3: Any) -> None:
    first = start({"run_id": "mine", "epochs": 2}, "exec-a")
    plan_before = run_objects(s3, "mine")["runs/mine/plan.json"]
    again = start({"run_id": "mine", "epochs": 2}, "exec-a")  # a Lambda retry of the start
    assert again["plan_key"] == first["plan_key"] and again["segment"] == first["segment"]
    assert run_objects(s3, "mine")["runs/mine/plan.json"] == plan_before
    frozen = Plan.from_json(plan_before.decode())
    assert frozen.run == RunOwner(run_id="mine", execution="exec-a", started=STARTED)
    assert frozen.training.epochs == 2


def test_a_leftover_fence_without_a_plan_is_not_taken_over(s3: Any) -> None:
    fence = b'{"format": 1, "epoch": 7, "token": "old"}'
    s3.put_object(Bucket=RESULTS, Key="runs/stale/fence.json", Body=fence)
    with pytest.raises(RunExists, match=r"fence\.json exists without a plan"):
        start({"run_id": "stale"}, "new-exec")
    assert run_objects(s3, "stale") == {"runs/stale/fence.json": fence}


def test_the_run_id_defaults_to_the_execution_so_distinct_executions_never_collide(
        s3: Any) -> None:
    one, two = start({}, "exec-x"), start({}, "exec-y")
    assert (one["run_id"], two["run_id"]) == ("exec-x", "exec-y")


def test_the_plans_conditional_create_refuses_even_without_a_fence(s3: Any) -> None:
    """A start that lost the race for the plan sees no fence yet: the 412 of its
    If-None-Match create refuses it (fasdl.run.run_claim)."""
    owned = PLAN.to_dict()
    owned["run"] = {"run_id": "race", "execution": "racer"}
    body = Plan.from_dict(owned).to_json().encode()
    s3.put_object(Bucket=RESULTS, Key="runs/race/plan.json", Body=body)
    with pytest.raises(RunExists, match="execution 'racer'"):
        start({"run_id": "race"}, "late-exec")
    assert run_objects(s3, "race") == {"runs/race/plan.json": body}


def test_an_execution_name_reused_after_90_days_does_not_take_over_the_run(s3: Any) -> None:
    """Step Functions lets a name be used again 90 days after its execution: the later one,
    started at another time, is another execution (refused, nothing touched), as the earlier
    run's own retried start (same time) is not."""
    start({"run_id": "exec-old", "epochs": 2}, "exec-old")  # the run id defaults to the name
    before = run_objects(s3, "exec-old")
    with pytest.raises(RunExists, match=rf"'exec-old' \(started {STARTED}\)"):
        start({"epochs": 5}, "exec-old", started="2026-11-29T07:00:00.000Z")
    assert run_objects(s3, "exec-old") == before
    assert start({"epochs": 2}, "exec-old")["segment"]["epoch"] == 1  # its own retry
    out = failed({"input": {"epochs": 5}, "error": {"Error": "RunExists", "Cause": "..."}},
                 "exec-old", started="2026-11-29T07:00:00.000Z")
    assert out["failure_key"] is None and "not this one" in out["not_recorded"]
    assert run_objects(s3, "exec-old") == before


def test_a_start_time_that_is_not_iso_8601_is_refused_by_field() -> None:
    with pytest.raises(PlanError, match=r"run\.started"):
        RunOwner(run_id="r", execution="e", started="yesterday").validate()


def failed(state: dict[str, Any], execution: str, started: str = STARTED) -> dict[str, Any]:
    arn = f"arn:aws:states:us-east-1:1:execution:m:{execution}"
    return dict(finalize.handler({"action": "failed", "state": state, "execution": arn,
                                  "execution_started": started}, FakeLambdaContext()))


def test_finalize_failed_leaves_another_executions_run_alone(s3: Any) -> None:
    """A second execution whose start failed before its claim (here a bad input) must not
    record into nor clean the owner's run."""
    start({"run_id": "owned"}, "owner-exec")
    s3.put_object(Bucket=EXCHANGE, Key="exchange/owned/1/it/00000000/merged/000", Body=b"x")
    before = run_objects(s3, "owned")
    out = failed({"input": {"run_id": "owned", "epochs": -1},
                  "error": {"Error": "PlanError", "Cause": "training.epochs"}}, "intruder")
    assert out["failure_key"] is None and "'owner-exec'" in out["not_recorded"]
    assert run_objects(s3, "owned") == before
    assert s3.list_objects_v2(Bucket=EXCHANGE)["KeyCount"] == 1


def test_finalize_failed_records_only_while_the_fence_is_at_its_epoch(s3: Any) -> None:
    run = start({"run_id": "fenced"}, "exec-f")  # epoch 1
    newer = trigger.handler({"action": "retry", "run": run, "error": {"Error": "x"}},
                            FakeLambdaContext())  # epoch 2: a newer attempt owns the run
    s3.put_object(Bucket=EXCHANGE, Key="exchange/fenced/2/it/00000000/merged/000", Body=b"x")
    before = run_objects(s3, "fenced")
    out = failed({"run": run, "error": {"Error": "RuntimeError", "Cause": "late"}}, "exec-f")
    assert out["failure_key"] is None and "newer attempt" in out["not_recorded"]
    assert run_objects(s3, "fenced") == before
    assert s3.list_objects_v2(Bucket=EXCHANGE)["KeyCount"] == 1
    out = failed({"run": newer, "error": {"Error": "RuntimeError", "Cause": "now"}}, "exec-f")
    assert out["failure_key"] == "runs/fenced/failure.json"
    assert s3.list_objects_v2(Bucket=EXCHANGE).get("KeyCount", 0) == 0


@pytest.mark.parametrize("action", ["retry", "shorten"])
def test_a_run_that_gives_up_leaves_the_fence_and_its_failure_is_recorded(
        s3: Any, action: str) -> None:
    """RetriesExhausted is raised before an epoch is issued, so the fence stays at the run
    state's epoch and finalize records the failure (it skipped it before: a 'newer attempt')."""
    run_id = f"doomed-{action}"
    run = start({"run_id": run_id}, "exec-d")
    raised = None
    for _ in range(10):  # retry gives up at its 3rd call, shorten at its 6th or sooner
        fence = run_objects(s3, run_id)[f"runs/{run_id}/fence.json"]
        try:
            run = trigger.handler({"action": action, "run": run, "error": {"Error": "x"}},
                                  FakeLambdaContext())
        except Exception as error:  # the handler's own give-up, its type checked below
            raised = error
            break
    assert type(raised).__name__ == "RetriesExhausted", raised
    assert run_objects(s3, run_id)[f"runs/{run_id}/fence.json"] == fence
    out = failed({"run": run, "error": {"Error": "RetriesExhausted", "Cause": "gave up"}},
                 "exec-d")
    assert out["failure_key"] == f"runs/{run_id}/failure.json"
