"""Fault injection for the local fault tests, parsed once per invocation, never in a deployment.

The worker handler reads :class:`FaultHooks` from its environment once and hands it to the
segment runner, which calls :meth:`FaultHooks.before_iteration` before each step; a
deployment sets none of these variables, so that call does nothing. Stdlib only.

* ``FASDL_TEST_CRASH_AT_ITERATION=<n>`` makes the worker ``FASDL_TEST_CRASH_WORKER=<w>`` (every
  worker when unset) exit the process with status 137, like an OOM kill, just before it trains
  global iteration ``n``, in attempts below ``FASDL_TEST_CRASH_ATTEMPTS`` (default 1: only
  attempt 0, so the retry succeeds);
* ``FASDL_TEST_ITERATION_DELAY_S=<s>`` sleeps that long in every iteration (a slower model:
  segment-length tests get a predictable time per iteration; the weights do not change);
* ``FASDL_TEST_FENCE_STALL=<s>[@<action>]:<marker file>`` (the trigger's): the first trigger
  call (of ``action``: start, next, shorten, retry) to read the fence (it creates the marker
  file) sleeps ``s`` seconds before its conditional write, as a Task whose Invoke Step
  Functions retried while it ran on (bench.chaos's ``trigger_retry``);
* ``FASDL_TEST_LATE_CALL=<s>[@<action>]:<marker file>``: the same call waits before it reads
  the fence, until its retry has issued the epoch (at most ``s`` seconds), then
  :data:`LATE_CALL_AFTER_S` more while the segment starts, and goes on after it
  (bench.chaos's ``late_trigger``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

CRASH_ITERATION_ENV = "FASDL_TEST_CRASH_AT_ITERATION"
CRASH_WORKER_ENV = "FASDL_TEST_CRASH_WORKER"
CRASH_ATTEMPTS_ENV = "FASDL_TEST_CRASH_ATTEMPTS"
DELAY_ENV = "FASDL_TEST_ITERATION_DELAY_S"
FENCE_STALL_ENV = "FASDL_TEST_FENCE_STALL"
LATE_CALL_ENV = "FASDL_TEST_LATE_CALL"
LATE_CALL_AFTER_S = 2.0  # the retry's segment starts its workers meanwhile
CRASH_EXIT_STATUS = 137  # what an OOM kill's SIGKILL looks like to Lambda


class FaultHookError(ValueError):
    """A malformed test-hook variable; the message names it."""


@dataclass(frozen=True)
class FaultHooks:
    crash_iteration: int | None = None
    crash_worker: int | None = None  # None: every worker
    crash_attempts: int = 1
    delay_s: float = 0.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FaultHooks:
        source = os.environ if environ is None else environ

        def integer(name: str) -> int | None:
            text = source.get(name, "")
            if not text:
                return None
            try:
                return int(text)
            except ValueError:
                raise FaultHookError(f"environment variable {name}: expected an integer, "
                                     f"got {text!r}") from None

        delay_text = source.get(DELAY_ENV, "") or "0"
        try:
            delay_s = float(delay_text)
        except ValueError:
            raise FaultHookError(f"environment variable {DELAY_ENV}: expected seconds, got "
                                 f"{delay_text!r}") from None
        attempts = integer(CRASH_ATTEMPTS_ENV)
        return cls(integer(CRASH_ITERATION_ENV), integer(CRASH_WORKER_ENV),
                   1 if attempts is None else attempts, delay_s)

    def crashes(self, worker: int, iteration: int, attempt: int) -> bool:
        return (self.crash_iteration == iteration and attempt < self.crash_attempts
                and self.crash_worker in (None, worker))

    def before_iteration(self, worker: int, iteration: int, attempt: int) -> None:
        """Exit like a killed process, or sleep, when a test asked for it."""
        if self.crashes(worker, iteration, attempt):
            print(f"FASDL test hook: worker {worker} exits at iteration {iteration}",
                  file=sys.stderr, flush=True)
            os._exit(CRASH_EXIT_STATUS)
        if self.delay_s:
            time.sleep(self.delay_s)


NO_FAULTS = FaultHooks()


# called with the trigger call's name ("next", "start:<exec>") and what ends the wait early
Stall = Callable[[str, Callable[[], bool] | None], None]


def fence_stall(environ: Mapping[str, str] | None = None) -> Stall | None:
    """The trigger's hook between reading the fence and writing it, or None."""
    return _stall(FENCE_STALL_ENV, environ)


def late_call(environ: Mapping[str, str] | None = None) -> Stall | None:
    """The trigger's hook before it reads the fence, or None."""
    return _stall(LATE_CALL_ENV, environ)


def _stall(name: str, environ: Mapping[str, str] | None) -> Stall | None:
    text = (os.environ if environ is None else environ).get(name, "")
    if not text:
        return None
    when, _, marker = text.partition(":")
    seconds, _, action = when.partition("@")
    try:
        delay_s = float(seconds)
    except ValueError:
        delay_s = -1.0
    if delay_s < 0 or not marker:
        raise FaultHookError(f"environment variable {name}: expected "
                             f"<seconds>[@<action>]:<marker file>, got {text!r}")

    def stall(call: str, until: Callable[[], bool] | None = None) -> None:
        if action and call.partition(":")[0] != action:
            return
        try:  # only the first call to create the marker stalls
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        if until is None:
            time.sleep(delay_s)
            return
        deadline = time.monotonic() + delay_s
        while not until() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(LATE_CALL_AFTER_S)

    return stall
