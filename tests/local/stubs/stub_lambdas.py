"""Stub trigger/worker/finalize that follow fasdl/contract/events.py, run by the emulator in tests.

Configured by environment: STUB_DIR (shared scratch dir), STUB_WORKERS, STUB_SEGMENTS,
STUB_HANG_AT / STUB_CRASH_AT ("segment:worker", attempt 0 only), STUB_RENDEZVOUS_S,
STUB_STOP_AT ("segment:ErrorName": the trigger's next after that segment raises ErrorName,
as fasdl.run.guards raises DeadlineExceeded / BudgetExceeded).
Every call is appended to STUB_DIR/calls.jsonl so the test can check the order.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class TransientError(Exception):
    pass


def _dir() -> Path:
    return Path(os.environ["STUB_DIR"])


def _record(kind: str, event: dict[str, Any], context: Any) -> None:
    line = {"kind": kind, "event": event, "time": time.time(), "pid": os.getpid(),
            "remaining_ms": context.get_remaining_time_in_millis(),
            "function": context.function_name, "memory": context.memory_limit_in_mb,
            "request_id": context.aws_request_id}
    with (_dir() / "calls.jsonl").open("a") as handle:
        handle.write(json.dumps(line) + "\n")


def _at(name: str, event: dict[str, Any]) -> bool:
    where = os.environ.get(name, "")
    segment = event["segment"]
    return bool(where) and segment["attempt"] == 0 and \
        where == f"{segment['index']}:{event['worker']}"


def trigger(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _record(f"trigger.{event['action']}", event, context)
    workers = int(os.environ.get("STUB_WORKERS", "4"))
    segments = int(os.environ.get("STUB_SEGMENTS", "3"))
    if event["action"] == "start":
        if "resume" in event["input"]:  # continue-as-new
            resumed: dict[str, Any] = event["input"]["resume"]
            return resumed
        return {"run_id": event["input"].get("run_id", "run-1"),
                "plan_key": "runs/run-1/plan.json",
                "segment": {"index": 0, "start_iteration": 0, "iterations": 8, "attempt": 0},
                "workers": list(range(workers)), "done": False,
                "cache": None}  # the real trigger's run state always names the cache
    run: dict[str, Any] = event["run"]
    segment = dict(run["segment"])
    stop_index, _, stop_error = os.environ.get("STUB_STOP_AT", "").partition(":")
    if event["action"] == "next" and stop_index == str(segment["index"]):
        raise type(stop_error, (RuntimeError,), {})(f"stopped after segment {stop_index}")
    if event["action"] == "shorten":
        segment.update(iterations=segment["iterations"] // 2, attempt=segment["attempt"] + 1)
        return {**run, "segment": segment}
    segment.update(index=segment["index"] + 1, attempt=0,
                   start_iteration=segment["start_iteration"] + segment["iterations"])
    return {**run, "segment": segment, "done": segment["index"] >= segments}


def worker(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _record("worker.train", event, context)
    segment = event["segment"]
    tag = f"{segment['index']}-{segment['attempt']}"
    (_dir() / f"arrived-{tag}-{event['worker']}").touch()
    # Rendezvous: finishes only if every worker of the segment runs at the same time.
    expected = len(range(int(os.environ.get("STUB_WORKERS", "4"))))
    deadline = time.monotonic() + float(os.environ.get("STUB_RENDEZVOUS_S", "20"))
    while len(list(_dir().glob(f"arrived-{tag}-*"))) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"rendezvous of segment {tag} timed out")
        time.sleep(0.02)
    if _at("STUB_HANG_AT", event):
        time.sleep(3600)
    if _at("STUB_CRASH_AT", event):
        raise ValueError("worker crashed on purpose")
    return {"worker": event["worker"]}


def finalize(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _record(f"finalize.{event['action']}", event, context)
    if event["action"] == "failed":
        return {}
    return {"run_id": event["run"]["run_id"], "model_key": "runs/run-1/model.npz",
            "summary_key": "runs/run-1/summary.json"}


def flaky(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Fails with TransientError on its first ``event["failures"]`` calls."""
    _record("flaky", event, context)
    calls = len([line for line in (_dir() / "calls.jsonl").read_text().splitlines()
                 if '"kind": "flaky"' in line])
    if calls <= int(event["failures"]):
        raise TransientError(f"transient failure {calls}")
    return {"calls": calls}


def sleepy(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _record("sleepy", event, context)
    time.sleep(float(event["sleep"]))
    return {"slept": event["sleep"]}


def environment(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"env": {name: os.environ.get(name) for name in event["names"]},
            "threads": os.environ.get("OMP_NUM_THREADS"),
            "remaining_ms": context.get_remaining_time_in_millis(),
            "arn": context.invoked_function_arn}


def exits(event: dict[str, Any], context: Any) -> dict[str, Any]:
    os._exit(3)


def unmarshallable(event: dict[str, Any], context: Any) -> Any:
    return {1, 2}


_CALLS = 0  # module state: a warm sandbox keeps it


def warm(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Counts its calls in module state; prints one line; raises, sleeps or exits on request."""
    global _CALLS
    _CALLS += 1
    print(f"call {_CALLS} of pid {os.getpid()}", flush=True)
    if event.get("exit"):
        os._exit(3)
    if event.get("grow_mb"):  # touched, then freed before returning
        block = bytearray(int(event["grow_mb"]) << 20)
        block[::4096] = b"x" * len(block[::4096])
        del block
    time.sleep(float(event.get("sleep", 0)))
    if event.get("raise"):
        raise ValueError("asked to fail")
    return {"pid": os.getpid(), "calls": _CALLS,
            "remaining_ms": context.get_remaining_time_in_millis()}
