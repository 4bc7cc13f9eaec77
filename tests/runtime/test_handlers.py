"""Handlers against an in-memory S3 (moto): trigger validation and finalize records (the worker
handler's guards are in test_worker_handler.py).

Fast unit tests of the control logic; the real servers and real worker processes are in
tests/integration/test_workers.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from typing import Any

import numpy as np
import pytest

from fasdl.contract.errors import RunExists
from fasdl.contract.keys import EXPORT_OBJECTS
from fasdl.contract.plan import Plan, PlanError
from fasdl.contract.settings import Settings, SettingsError
from fasdl.exchange import stores
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.run.checkpoint import array_bytes, commit_manifest, put_objects
from fasdl.run.run_state import RetriesExhausted, RunStateError
from tests.lambda_context import FakeLambdaContext
from tests.runtime.conftest import EXCHANGE, RESULTS
from tests.runtime.handler_helpers import (  # s3_env, s3_objects: PLAN's S3 and dataset
    PLAN,
    finalize,
    read_json,
    s3_env,  # noqa: F401
    s3_objects,  # noqa: F401
    start,
    trigger,
)
from tests.runtime.kreduce_helpers import make_plan


def test_start_freezes_the_plan_and_returns_segment_zero(s3: Any) -> None:
    run = start({"epochs": 3, "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID": "x"})
    measured = run.pop("usage")  # the run's measured figures start (fasdl.run.usage)
    assert measured["trigger_requests"] == 1 and measured["worker_requests"] == 0
    # started_at: this start()'s clock time, told from 0 or a duration (no load takes 60 s)
    assert measured["trigger_gb_s"] > 0 and abs(measured["started_at"] - time.time()) < 60
    assert run == {"run_id": "exec-1", "plan_key": "runs/exec-1/plan.json",
                   "segment": {"index": 0, "start_iteration": 0, "iterations": 30,
                               "attempt": 0, "epoch": 1, "resume_epoch": 0},
                   "workers": [0, 1, 2, 3], "done": False,
                   "cache": None}  # an S3 plan: no exchange cache to look up
    frozen = Plan.from_dict(read_json(s3, run["plan_key"]))
    assert frozen.training.epochs == 3 and frozen.run is not None
    assert (frozen.run.run_id, frozen.run.execution) == ("exec-1", "exec-1")
    layout = read_json(s3, "runs/exec-1/partitions.json")
    assert [part["end"] - part["start"] for part in layout] == PLAN.partition_sizes()
    again = start({}, "exec-1")  # a retried start is idempotent, its epoch too (issue 41)
    assert again["run_id"] == "exec-1" and again["segment"]["epoch"] == 1
    resumed = {**again, "segment": {**again["segment"], "index": 7}}
    # continue-as-new: the same state, and a new epoch fences the old execution's workers;
    # the run's totals go on (one more trigger request), from the same start time
    continued = start({"resume": resumed})
    totals, before = continued.pop("usage"), resumed.pop("usage")
    assert totals["started_at"] == before["started_at"]
    assert totals["trigger_requests"] == before["trigger_requests"] + 1
    assert totals["trigger_gb_s"] > before["trigger_gb_s"]
    assert continued == {**resumed, "segment": {**resumed["segment"], "epoch": 2}}
    assert read_json(s3, "runs/exec-1/fence.json")["epoch"] == 2


def test_next_and_shorten_through_the_handler(s3: Any) -> None:
    run = start({"run_id": "loop"})
    run = trigger.handler({"action": "shorten", "run": run,
                           "error": {"Error": "FasDL.SegmentTimeout", "Cause": ""}},
                               FakeLambdaContext())
    assert run["segment"] == {"index": 0, "start_iteration": 0, "iterations": 5, "attempt": 1,
                              "epoch": 2, "resume_epoch": 0}
    run = trigger.handler({"action": "next", "run": run}, FakeLambdaContext())
    assert run["segment"] == {"index": 1, "start_iteration": 5, "iterations": 5, "attempt": 0,
                              "epoch": 3, "resume_epoch": 2}
    run = trigger.handler({"action": "next", "run": run}, FakeLambdaContext())
    assert run["done"] and run["segment"]["start_iteration"] == 10
    one = {**run, "done": False, "segment": {**run["segment"], "iterations": 1}}
    with pytest.raises(RetriesExhausted):
        trigger.handler({"action": "shorten", "run": one, "error": {}}, FakeLambdaContext())
    with pytest.raises(RunStateError, match="'action'"):
        trigger.handler({"action": "dance"}, FakeLambdaContext())


def test_retry_through_the_handler(s3: Any) -> None:
    run = start({"run_id": "crashy"})
    crash = {"Error": "FasDL.WorkerCrashed", "Cause": "exit status 137"}
    again = trigger.handler({"action": "retry", "run": run, "error": crash}, FakeLambdaContext())
    assert again["segment"] == {**run["segment"], "attempt": 1, "retries": 1, "epoch": 2}
    again = trigger.handler({"action": "retry", "run": again, "error": crash}, FakeLambdaContext())
    with pytest.raises(RetriesExhausted, match="retries"):
        trigger.handler({"action": "retry", "run": again, "error": crash}, FakeLambdaContext())


@pytest.mark.parametrize(("event_input", "field"), [
    ({"dataset": "data/nowhere"}, "workload.dataset"),
    ({"plan": make_plan(8, 2, 2, 3, "hap", samples=100).to_dict()}, "deployment.workers"),
    ({"plan": {"version": 1, "workload": {}}}, "workload.name"),
    ({"epochs": -1}, "training.epochs"),
    ({"run_id": "bad/id"}, "input field 'run_id'"),
    ({"run_id": "ok\n"}, "input field 'run_id'"),
    ({"epoch": 5}, "input field 'epoch'.*did you mean 'epochs'"),
    ({"run-id": "x"}, "input field 'run-id'.*did you mean 'run_id'"),
    ({"resume": {}, "epochs": 3}, "cannot be combined with epochs"),
])
def test_bad_input_fails_before_any_worker_naming_the_field(
        s3: Any, event_input: dict[str, Any], field: str) -> None:
    with pytest.raises((PlanError, RunStateError), match=field.replace(".", r"\.")
                       if "*" not in field else field):
        start(event_input)
    listing = s3.list_objects_v2(Bucket=RESULTS)
    assert listing.get("KeyCount", 0) == 0  # nothing written


def test_corrupt_deployed_plan_and_reused_run_id_are_refused(
        s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    start({"run_id": "taken"}, execution="first")
    with pytest.raises(RunExists, match="already exists"):  # issue 41: named, not retried
        start({"run_id": "taken"}, execution="second")
    monkeypatch.setenv("FASDL_PLAN", "{not json")
    with pytest.raises(PlanError, match="not valid JSON"):
        start({"run_id": "fresh"})


def test_missing_environment_is_named() -> None:
    with pytest.raises(SettingsError, match="FASDL_RESULTS_BUCKET"):
        Settings.from_env({"FASDL_CHANNEL": "s3", "FASDL_DATASETS_BUCKET": "d"})
    with pytest.raises(SettingsError, match="FASDL_CACHE_ENDPOINT"):
        Settings.from_env({"FASDL_CHANNEL": "valkey", "FASDL_DATASETS_BUCKET": "d",
                           "FASDL_RESULTS_BUCKET": "r"})
    settings = Settings.from_env({"FASDL_CHANNEL": "valkey", "FASDL_DATASETS_BUCKET": "d",
                                  "FASDL_RESULTS_BUCKET": "r", "FASDL_CACHE_ENDPOINT": "h",
                                  "FASDL_CACHE_PORT": "6380", "FASDL_CACHE_TLS": "1"})
    config = stores.exchange_config(settings)
    assert (config.kind, config.host, config.port, config.tls, config.cluster,
            config.prefix) == ("valkey", "h", 6380, True, True, "exchange/")


def test_finalize_failed_records_the_error_and_cleans_the_exchange(s3: Any) -> None:
    s3.put_object(Bucket=EXCHANGE, Key="exchange/doomed/0/it/00000000/merged/000", Body=b"x")
    s3.put_object(Bucket=EXCHANGE, Key="exchange/other/0/keep", Body=b"x")
    state = {"input": {"run_id": "doomed"}, "count": {"segments": 0},
             "error": {"Error": "States.TaskFailed", "Cause": "boom"}}
    out = finalize.handler({"action": "failed", "state": state,
                            "execution": "arn:aws:states:us-east-1:1:execution:m:doomed"},
                                FakeLambdaContext())
    record = read_json(s3, out["failure_key"])
    assert record["error"] == "States.TaskFailed" and record["cause"] == "boom"
    assert out["failure_key"] == "runs/doomed/failure.json"
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=EXCHANGE)["Contents"]]
    assert keys == ["exchange/other/0/keep"]


def test_finalize_succeeded_writes_model_and_summary(s3: Any) -> None:
    run = start({"run_id": "fin"})
    done = {**run, "done": True, "segment": {"index": 1, "start_iteration": 10,
                                             "iterations": 0, "attempt": 0,
                                             "epoch": 2, "resume_epoch": 0}}
    store = S3Channel(RESULTS, "runs/", client=s3)
    weights = np.arange(12, dtype=np.float32)
    described = {"format": 1, "model": "mlp", "classes": 3, "input_shape": [1, 4, 4]}
    for worker in range(4):  # worker 0's export objects: finalize copies them without torch
        objects = ({"model": array_bytes(weights),
                    EXPORT_OBJECTS["model.safetensors"]: b"state dict",
                    EXPORT_OBJECTS["model.json"]: json.dumps(described).encode()}
                   if worker == 0 else {f"w{worker}": b"m"})
        put_objects(store, "fin", 10, 0, worker, objects)
    commit_manifest(store, "fin", 10, 0, workers=4, timeout_s=5.0,
                    meta={"model": "mlp", "num_classes": "3", "input_shape": "1,4,4",
                          "parameters": "12"})
    settings = Settings.from_env()
    for attempt, workers in ((0, [0, 1]), (1, [0, 1, 2, 3])):  # attempt 0 timed out
        for worker in workers:
            s3.put_object(Bucket=RESULTS, Key=settings.segment_result_key("fin", 0, attempt,
                                                                          worker),
                          Body=json.dumps({"worker": worker, "iterations_done": 10,
                                           "loss_mean": 1.0 + worker, "loss_last": 0.5,
                                           "accuracy": 0.9 if worker == 0 else None,
                                           "time": {"compute_s": 1.0, "total_s": 2.0},
                                           "invocation": {"billed_ms": 2000,
                                                          "memory_mb": 1024}}))
    out = finalize.handler({"action": "succeeded", "run": done, "execution": "e"},
                           FakeLambdaContext())
    assert (out["model_key"], out["summary_key"]) == ("runs/fin/model.npy",
                                                       "runs/fin/summary.json")
    model = s3.get_object(Bucket=RESULTS, Key=out["model_key"])["Body"].read()
    assert np.array_equal(np.load(io.BytesIO(model), allow_pickle=False), weights)
    assert s3.get_object(Bucket=RESULTS, Key="runs/fin/model.safetensors")["Body"].read() == (
        b"state dict")
    meta = read_json(s3, "runs/fin/model.json")
    assert meta == {**described, "iterations": 10, "run_id": "fin",
                    "sha256": hashlib.sha256(b"state dict").hexdigest()}
    assert out["extra"]["export_key"] == "runs/fin/model.safetensors"
    summary = read_json(s3, out["summary_key"])
    assert summary["segments"][0]["attempt"] == 1 and summary["retried_attempts"] == 1
    assert summary["final_loss"] == 2.5 and summary["final_accuracy"] == 0.9
    assert summary["time_s"]["compute_s"] == 4.0
    # every attempt's invocations are billed, the failed one's too: 6 x 2 s at 1 GB
    assert summary["segments"][0]["billed_gb_s"] == 12.0
    measured = summary["measured"]  # beside the plan's predictions (none in this plan)
    assert measured["lambda_requests"] == 2 and measured["predicted_s"] is None
    assert measured["billed_gb_s"]["trigger"] > 0 and measured["measured_lambda_usd"] is None
    assert measured["measured_basis"].startswith("estimated from in-function durations")
    assert "adaptations" not in summary  # a static run has none


def test_an_adaptive_runs_decisions_go_into_its_summary_in_segment_order(s3: Any) -> None:
    """What planner/adapt/run_step.py recorded at each boundary, as written, in segment
    order; none for a run that recorded none."""
    from fasdl.run.results import adaptation_records
    settings = Settings.from_env()
    for segment in (12, 3, 7):
        key = settings.results_key(f"ad/adaptations/{segment:05d}.json")
        s3.put_object(Bucket=RESULTS, Key=key, Body=json.dumps(
            {"segment": segment, "action": "continue"}).encode())
    assert [r["segment"] for r in adaptation_records(s3, settings, "ad")] == [3, 7, 12]
    assert adaptation_records(s3, settings, "none") == []


def test_finalize_rejects_a_damaged_or_missing_final_model(s3: Any) -> None:
    from fasdl.contract.keys import checkpoint_object_key
    from fasdl.run.results import ResultError

    run = start({"run_id": "dmg"})
    done = {**run, "done": True, "segment": {"index": 1, "start_iteration": 10,
                                             "iterations": 0, "attempt": 0,
                                             "epoch": 2, "resume_epoch": 0}}
    with pytest.raises(ResultError, match="no complete checkpoint at iteration 10"):
        finalize.handler({"action": "succeeded", "run": done, "execution": "e"},
                         FakeLambdaContext())
    store = S3Channel(RESULTS, "runs/", client=s3)
    put_objects(store, "dmg", 10, 0, 0, {"model": array_bytes(np.ones(4, np.float32))})
    for worker in (1, 2, 3):
        put_objects(store, "dmg", 10, 0, worker, {f"w{worker}": b"m"})
    commit_manifest(store, "dmg", 10, 0, workers=4, timeout_s=5.0)
    store.put(checkpoint_object_key("dmg", 10, 0, "model"), array_bytes(np.zeros(4, np.float32)))
    with pytest.raises(ResultError, match="checksum"):
        finalize.handler({"action": "succeeded", "run": done, "execution": "e"},
                         FakeLambdaContext())
