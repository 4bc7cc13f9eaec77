"""The worker handler's guards (its event checked field by field, the time guard, the peer
wait), the torch layer's load and its failures, the metrics' format, and what each handler
imports. The trigger and finalize handlers are in test_handlers.py."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fasdl.aws import torch_setup
from fasdl.aws.metrics import StepMetrics
from fasdl.contract.settings import STUB_ENV, Settings
from fasdl.run.segment_runner import (
    SegmentTooLong,
    TimeGuard,
    WorkerEvent,
    WorkerEventError,
    peer_wait_s,
)
from tests.lambda_context import FakeLambdaContext
from tests.runtime.handler_helpers import FUNCTIONS


def test_worker_event_is_checked_field_by_field() -> None:
    good = {"action": "train", "run_id": "r", "plan_key": "runs/r/plan.json", "worker": 1,
            "segment": {"index": 0, "start_iteration": 0, "iterations": 3, "attempt": 0,
                        "epoch": 1, "resume_epoch": 0}}
    assert WorkerEvent.parse(good).iterations == 3
    with pytest.raises(WorkerEventError, match=r"segment\.epoch"):
        WorkerEvent.parse({**good, "segment": {**good["segment"], "epoch": 0}})
    with pytest.raises(WorkerEventError, match=r"segment\.iterations"):
        WorkerEvent.parse({**good, "segment": {**good["segment"], "iterations": 0}})
    with pytest.raises(WorkerEventError, match="'worker'"):
        WorkerEvent.parse({**good, "worker": True})
    with pytest.raises(WorkerEventError, match="'plan_key'"):
        WorkerEvent.parse({**good, "plan_key": None})


def test_time_guard_predicts_iteration_plus_checkpoint() -> None:
    left = [100.0]
    guard = TimeGuard(lambda: left[0], margin_s=5.0, checkpoint_s=10.0)
    guard.check(0)
    guard.observe(30.0)
    guard.observe(20.0)
    guard.check(1)  # 100 >= 30 + 10 + 5
    left[0] = 44.0
    with pytest.raises(SegmentTooLong, match="iteration 2"):
        guard.check(2)


def test_peer_wait_is_bounded_by_iteration_time_and_time_left() -> None:
    settings = Settings.from_env({
        "FASDL_CHANNEL": "s3", "FASDL_DATASETS_BUCKET": "d", "FASDL_RESULTS_BUCKET": "r",
        "FASDL_EXCHANGE_BUCKET": "e",
        "FASDL_PEER_WAIT_START_S": "60", "FASDL_PEER_WAIT_MIN_S": "4",
        "FASDL_PEER_WAIT_FACTOR": "3"})
    assert peer_wait_s(settings, [], 500.0) == 60.0  # first iteration: staggered cold starts
    assert peer_wait_s(settings, [0.1, 0.5], 500.0) == 4.0  # fast iterations: the floor
    assert peer_wait_s(settings, [0.1, 2.0], 500.0) == 6.0  # 3 x the slowest recent one
    assert peer_wait_s(settings, [2.0], 5.0) == 5.0  # never past the time left
    assert peer_wait_s(settings, [2.0], -3.0) == 1.0


def test_stub_layer_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    assert torch_setup.prepare_torch() is None  # torch is installed here
    monkeypatch.setattr(torch_setup.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv(STUB_ENV, "1")
    assert "make layer" in (torch_setup.prepare_torch() or "")


@pytest.fixture
def new_sandbox() -> Iterator[None]:
    """A sandbox that has not loaded torch yet (and none left behind for other tests)."""
    torch_setup.reset_for_tests()
    yield
    torch_setup.reset_for_tests()


def test_torch_is_loaded_once_per_sandbox(monkeypatch: pytest.MonkeyPatch,
                                          new_sandbox: None) -> None:
    calls: list[int] = []

    def unpack() -> tuple[str | None, str]:
        calls.append(1)
        time.sleep(0.05)  # the unpack's cost, paid once
        return None, "installed"

    monkeypatch.setattr(torch_setup, "_prepare", unpack)
    first, second = torch_setup.load_torch(), torch_setup.load_torch()
    assert calls == [1]
    assert first.fresh and first.outcome == "installed" and first.seconds >= 0.05  # its sleep
    assert not second.fresh and second.seconds == first.seconds  # cached: costs nothing
    assert first.log_fields() == {"torch_load_s": round(first.seconds, 3),
                                  "torch_load_outcome": "installed"}


def test_stub_layer_fails_each_invocation_with_the_reason(
        s3: Any, monkeypatch: pytest.MonkeyPatch, new_sandbox: None) -> None:
    from handlers import profiler, worker

    monkeypatch.setattr(torch_setup.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv(STUB_ENV, "1")
    for _ in range(2):  # the first call finds the stub, the second gets the cached verdict
        with pytest.raises(torch_setup.TorchUnavailable, match="make layer"):
            worker.handler({}, FakeLambdaContext())
        with pytest.raises(torch_setup.TorchUnavailable, match="FASDL_TORCH_LAYER_STUB"):
            profiler.handler({"action": "profile", "profile_id": "p"}, FakeLambdaContext())


def test_first_worker_invocation_logs_and_meters_the_torch_load(
        s3: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture, new_sandbox: None) -> None:
    from fasdl.run import segment_runner
    from handlers import worker

    monkeypatch.setattr(torch_setup, "_prepare", lambda: (None, "installed"))
    monkeypatch.setattr(segment_runner, "run_segment",
                        lambda settings, event, remaining, metrics, client, **_: {
                            "loss_last": 1.0, "accuracy": 0.5})
    monkeypatch.setattr(segment_runner, "write_result", lambda *args: "runs/r/w.json")
    event = {"action": "train", "run_id": "r", "plan_key": "runs/r/plan.json", "worker": 0,
             "segment": {"index": 0, "start_iteration": 0, "iterations": 3, "attempt": 0,
                         "epoch": 1, "resume_epoch": 0}}
    logged, metered = [], []
    for _ in range(2):
        caplog.clear()
        worker.handler(event, FakeLambdaContext())
        logged.append([r for r in caplog.records if r.getMessage() == "torch loaded"])
        emf = [json.loads(line) for line in capsys.readouterr().out.splitlines()
               if line.startswith("{")]
        metered.append([value for r in emf for value in r.get("TorchLoadTime", [])])
    assert len(logged[0]) == 1
    fields = logged[0][0].__dict__  # powertools puts the extra keys on the record
    assert fields["torch_load_outcome"] == "installed"
    assert metered[0] == [pytest.approx(fields["torch_load_s"], abs=1e-3)]
    # a warm invocation pays nothing, so it neither logs nor meters a load
    assert logged[1] == [] and metered[1] == []


def test_handler_modules_import_without_torch() -> None:
    # Lambda's init phase runs the module import: it must not unpack or import torch
    import subprocess

    code = ("import sys, handlers.worker, handlers.profiler; from fasdl.aws import torch_setup; "
            "print(sorted({'torch', 'fasdl_torch_loader'} & set(sys.modules)), "
            "torch_setup._loaded)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(FUNCTIONS), "PATH": "/usr/bin"})
    assert out.stdout.strip() == "[] None"


def test_metrics_are_emf_with_the_stack_dimension_only(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from fasdl.exchange.kreduce import StepStats

    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "would-add-a-dimension")
    metrics = StepMetrics("FasDL", "my-stack")
    for iteration in range(3):
        metrics.record(StepStats(iteration, 2.0 - iteration, 0.1, 0.2, 0.3, 0.4, 0.5, 1, 2),
                       cpu_s=0.25 * iteration)
    metrics.flush()
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    directive = record["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "FasDL" and directive["Dimensions"] == [["Stack"]]
    names = {metric["Name"] for metric in directive["Metrics"]}
    assert names == {"IterationTime", "ComputeTime", "UploadTime", "AggregateTime",
                     "DownloadTime", "IdleTime", "CpuTime", "Loss"}
    assert record["Stack"] == "my-stack" and record["Loss"] == [2.0, 1.0, 0.0]
    assert record["CpuTime"] == [0.0, 0.25, 0.5]
    assert record["IterationTime"][0] == pytest.approx(1.5)


def test_trigger_imports_neither_torch_nor_numpy_nor_redis() -> None:
    # the trigger Lambda has no torch layer and no numpy/redis in its bundle
    import subprocess

    code = ("import sys, handlers.trigger, handlers.finalize as f; "
            "print(sorted({'torch', 'numpy', 'redis'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(FUNCTIONS), "PATH": "/usr/bin"})
    assert out.stdout.strip() == "[]"
