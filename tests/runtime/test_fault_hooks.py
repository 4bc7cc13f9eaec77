"""fasdl.run.fault_hooks: the fault tests' crash, delay and trigger stalls, parsed once; a
deployment's do nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fasdl.run.fault_hooks import (
    FENCE_STALL_ENV,
    LATE_CALL_AFTER_S,
    LATE_CALL_ENV,
    NO_FAULTS,
    FaultHookError,
    FaultHooks,
    Stall,
    fence_stall,
    late_call,
)


def test_nothing_set_is_no_fault() -> None:
    assert FaultHooks.from_env({}) == NO_FAULTS
    assert not any(NO_FAULTS.crashes(worker, iteration, 0)
                   for worker in range(4) for iteration in range(100))


def test_a_crash_hits_its_worker_iteration_and_first_attempts_only() -> None:
    hooks = FaultHooks.from_env({"FASDL_TEST_CRASH_AT_ITERATION": "30",
                                 "FASDL_TEST_CRASH_WORKER": "2",
                                 "FASDL_TEST_CRASH_ATTEMPTS": "2"})
    assert hooks.crashes(2, 30, 0) and hooks.crashes(2, 30, 1)
    assert not hooks.crashes(2, 30, 2)  # the retry past the attempts succeeds
    assert not hooks.crashes(1, 30, 0) and not hooks.crashes(2, 29, 0)
    every = FaultHooks.from_env({"FASDL_TEST_CRASH_AT_ITERATION": "5"})
    assert all(every.crashes(worker, 5, 0) for worker in range(4))


@pytest.mark.parametrize(("name", "value"), [("FASDL_TEST_CRASH_AT_ITERATION", "x"),
                                             ("FASDL_TEST_ITERATION_DELAY_S", "soon")])
def test_a_malformed_hook_names_its_variable(name: str, value: str) -> None:
    with pytest.raises(FaultHookError, match=name):
        FaultHooks.from_env({name: value})


@pytest.mark.parametrize("hook", [fence_stall, late_call])
def test_a_trigger_stall_hits_the_first_call_of_its_action_only(
        hook: Callable[[dict[str, str]], Stall | None], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    name = FENCE_STALL_ENV if hook is fence_stall else LATE_CALL_ENV
    assert hook({}) is None
    stall = hook({name: f"2.5@next:{tmp_path / 'marker'}"})
    assert stall is not None
    stall("start:run-1", None)  # another action: no stall, the marker stays free
    stall("next", None)
    stall("next", None)  # the retry of the call that stalled goes straight on
    assert slept == [2.5]
    any_action = hook({name: f"1:{tmp_path / 'other'}"})
    assert any_action is not None
    any_action("start:run-1", None)
    any_action("next", None)
    assert slept == [2.5, 1.0]


def test_a_late_call_waits_until_its_retry_issued_then_a_little_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    stall = late_call({LATE_CALL_ENV: f"60@next:{tmp_path / 'marker'}"})
    assert stall is not None
    polls = iter([False, False, True])
    stall("next", lambda: next(polls))
    assert slept == [0.2, 0.2, LATE_CALL_AFTER_S]


@pytest.mark.parametrize("value", ["x:/tmp/m", "1", "-1:/tmp/m", "1@next"])
def test_a_malformed_stall_names_its_variable_and_format(value: str) -> None:
    with pytest.raises(FaultHookError, match=rf"{LATE_CALL_ENV}: expected "
                                             r"<seconds>\[@<action>\]:<marker file>"):
        late_call({LATE_CALL_ENV: value})
