"""Warm sandboxes (local/lambda_/sandbox.py): reused as Lambda reuses an execution environment."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from infra import lambda_errors
from local.lambda_.emulator import LambdaEmulator
from local.lambda_.invocation import FunctionSpec, Invocation
from tests.local.conftest import STUBS

# generous: an invocation's timeout counts its sandbox's cold start, which a loaded machine
# stretches; a timeout only shows where a handler sleeps past it on purpose
TIMEOUT_S = 15
SHORT_TIMEOUT_S = 5  # where a handler does sleep past it: still ~10x a cold start


def _spec(name: str = "Fn", timeout_s: float = TIMEOUT_S, **env: str) -> FunctionSpec:
    return FunctionSpec(name=name, handler="stub_lambdas.warm", code_dir=STUBS,
                        timeout_s=timeout_s, memory_mb=512, environment=env)


def _result(invocation: Invocation) -> dict[str, Any]:
    assert invocation.function_error is None, invocation.payload
    result: dict[str, Any] = json.loads(invocation.payload)
    return result


def test_a_second_invocation_runs_warm_in_the_same_process_with_its_own_log() -> None:
    with LambdaEmulator({"Fn": _spec()}) as emulator:
        first, second = emulator.invoke("Fn", {}), emulator.invoke("Fn", {})
        logs = [i.log_path.read_text() for i in (first, second) if i.log_path is not None]
    one, two = _result(first), _result(second)
    assert (first.cold_start, second.cold_start) == (True, False)
    assert one["pid"] == two["pid"] and (one["calls"], two["calls"]) == (1, 2)
    # each invocation its own deadline: the warm one's starts at its call, after the first
    # invocation's whole time (which a shared deadline would have spent)
    assert two["remaining_ms"] > TIMEOUT_S * 1000 - (second.duration_s * 1000 + 1), (
        two, first.duration_s)
    assert "call 1 " in logs[0] and "call 2 " not in logs[0]
    assert "call 2 " in logs[1] and "call 1 " not in logs[1]
    assert "cold start" in logs[0] and "cold start" not in logs[1]
    assert f"REPORT RequestId: {second.request_id}" in logs[1]


def test_a_handler_error_keeps_the_sandbox_warm() -> None:
    with LambdaEmulator({"Fn": _spec()}) as emulator:
        failed = emulator.invoke("Fn", {"raise": True})
        after = emulator.invoke("Fn", {})
    assert failed.error_type == "ValueError"
    assert after.cold_start is False and _result(after)["calls"] == 2


@pytest.mark.parametrize(("event", "error"), [({"exit": True}, lambda_errors.EXIT),
                                              ({"sleep": SHORT_TIMEOUT_S + 2},
                                               lambda_errors.TIMEOUT)])
def test_a_crashed_or_timed_out_sandbox_is_never_reused(event: dict[str, Any],
                                                        error: str) -> None:
    with LambdaEmulator({"Fn": _spec(timeout_s=SHORT_TIMEOUT_S)}) as emulator:
        first = _result(emulator.invoke("Fn", {}))
        broken = emulator.invoke("Fn", event)
        after = emulator.invoke("Fn", {})
    assert broken.error_type == error and broken.cold_start is False
    assert after.cold_start is True
    assert _result(after)["pid"] != first["pid"] and _result(after)["calls"] == 1


def test_concurrent_invocations_each_get_their_own_sandbox() -> None:
    with LambdaEmulator({"Fn": _spec()}) as emulator:
        results: list[Invocation] = []
        threads = [threading.Thread(target=lambda: results.append(
            emulator.invoke("Fn", {"sleep": 1}))) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        again = [emulator.invoke("Fn", {}) for _ in range(2)]
    assert len({_result(i)["pid"] for i in results}) == 2
    assert all(i.cold_start for i in results)
    assert [i.cold_start for i in again] == [False, False]  # both stayed warm, in turn


def test_other_configuration_or_expired_idle_time_starts_cold() -> None:
    specs = {"Fn": _spec(), "Other": _spec("Other"), "Env": _spec("Env", X="1")}
    # the default idle time (minutes): the other two's cold starts, however slow, keep Fn warm
    with LambdaEmulator(specs) as emulator:
        pids = [_result(emulator.invoke(name, {}))["pid"] for name in ("Fn", "Other", "Env")]
        warm = emulator.invoke("Fn", {})
    assert len(set(pids)) == 3
    assert warm.cold_start is False and _result(warm)["pid"] == pids[0]
    with LambdaEmulator({"Fn": _spec()}, warm_idle_s=0.5) as emulator:
        kept = _result(emulator.invoke("Fn", {}))["pid"]
        time.sleep(0.8)  # past the idle time: load only lengthens the wait
        expired = emulator.invoke("Fn", {})
    assert expired.cold_start is True and _result(expired)["pid"] != kept


def test_no_idle_time_means_every_start_is_cold() -> None:
    with LambdaEmulator({"Fn": _spec()}, warm_idle_s=None) as emulator:
        invocations = [emulator.invoke("Fn", {}) for _ in range(2)]
    assert [i.cold_start for i in invocations] == [True, True]
    assert len({_result(i)["pid"] for i in invocations}) == 2


def test_a_warm_invocation_reports_its_own_peak_not_the_sandboxes() -> None:
    """Lambda's REPORT gives each invocation's Max Memory Used; the sandbox resets its
    high-water mark (VmHWM) before each one."""
    with LambdaEmulator({"Fn": _spec()}) as emulator:
        big = emulator.invoke("Fn", {"grow_mb": 150})
        small = emulator.invoke("Fn", {})
    assert big.peak_rss_mb is not None and small.peak_rss_mb is not None
    assert small.cold_start is False
    assert big.peak_rss_mb > 150 and small.peak_rss_mb < big.peak_rss_mb - 100
