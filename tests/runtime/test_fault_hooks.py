"""fasdl.run.fault_hooks: the fault tests' crash and delay, parsed once; a deployment's do
nothing."""

from __future__ import annotations

import pytest

from fasdl.run.fault_hooks import NO_FAULTS, FaultHookError, FaultHooks


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
