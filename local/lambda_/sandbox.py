"""Warm sandboxes: one process serves a function's invocations one at a time, as on Lambda.

Lambda runs an invocation in an idle execution environment of the same function and
configuration when it has one (a warm start): the runtime, the handler's imports, module state
and /tmp survive; an environment idle for long is shut down. After a crash, a timeout or an
out-of-memory kill Lambda resets the environment (AWS Lambda Developer Guide, "Understand the
Lambda execution environment lifecycle": failures during the invoke phase), and an Init error
is retried in a new one; a handler that raised has reported its error through the runtime,
which then asks for the next event, so that environment stays warm.

A :class:`Sandbox` is ``python -m local.lambda_.invoke --serve HANDLER`` (local/lambda_/invoke.py)
with a request pipe on stdin and an answer pipe whose descriptor it finds in ``CONTROL_FD_ENV``.
:class:`SandboxPool` keeps
the idle ones per :func:`sandbox_key` and shuts down those idle for ``idle_s``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from local.lambda_.invoke import CONTROL_FD_ENV, DONE

DEFAULT_IDLE_S = 300.0  # Lambda does not document it; minutes, not hours
SandboxKey = tuple[str, ...]


def sandbox_key(name: str, handler: str, code_dir: str, memory_mb: int,
                environment: Mapping[str, str]) -> SandboxKey:
    """Invocations share a sandbox only with the same code, handler, memory and environment."""
    return (name, handler, code_dir, str(memory_mb), json.dumps(sorted(environment.items())))


@dataclass
class Sandbox:
    """A started sandbox process; :meth:`serve` runs one invocation in it."""

    key: SandboxKey
    process: subprocess.Popen[bytes]
    answers: IO[bytes]
    idle_since: float = field(default_factory=time.monotonic)
    served: int = 0

    @classmethod
    def start(cls, key: SandboxKey, command: list[str], *, cwd: str, env: Mapping[str, str],
              log: IO[bytes]) -> Sandbox:
        """Start it in its own session (a kill reaches the handler's children too); its Init
        output goes to ``log``, the first invocation's."""
        read_end, write_end = os.pipe()
        try:
            process = subprocess.Popen(
                command, cwd=cwd, env={**env, CONTROL_FD_ENV: str(write_end)},
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(write_end,))
        finally:
            os.close(write_end)
        return cls(key, process, os.fdopen(read_end, "rb", buffering=0))

    def serve(self, request: Mapping[str, Any], timeout_s: float) -> bool | None:
        """Send one invocation; True once answered, False if the process died, None on timeout."""
        self.served += 1
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        ready, _, _ = select.select([self.answers], [], [], max(timeout_s, 0.0))
        if not ready:
            return None
        return self.answers.readline() == DONE

    def reset_peak(self) -> None:
        """Start the next invocation's high-water mark (VmHWM) afresh: Lambda reports each
        invocation's own Max Memory Used. Linux: ``5`` to the process's clear_refs."""
        with contextlib.suppress(OSError):
            Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self, before: Callable[[], None] | None = None) -> None:
        """Kill its process group (``before`` first: a CPU throttle's release)."""
        kill_group(self.process, before)
        with contextlib.suppress(OSError):
            self.answers.close()


class SandboxPool:
    """Idle sandboxes by key; ``idle_s`` None or <= 0 keeps none (every start is cold)."""

    def __init__(self, idle_s: float | None = DEFAULT_IDLE_S) -> None:
        self.idle_s = idle_s
        self._idle: list[Sandbox] = []
        self._lock = threading.Lock()

    def take(self, key: SandboxKey) -> Sandbox | None:
        """An idle, live sandbox of ``key`` (the longest idle first), or None."""
        now = time.monotonic()
        with self._lock:
            expired = [s for s in self._idle
                       if not s.alive() or now - s.idle_since >= (self.idle_s or 0.0)]
            self._idle = [s for s in self._idle if s not in expired]
            found = next((s for s in self._idle if s.key == key), None)
            if found is not None:
                self._idle.remove(found)
        for sandbox in expired:
            sandbox.kill()
        return found

    def give_back(self, sandbox: Sandbox) -> None:
        if not self.idle_s or self.idle_s <= 0 or not sandbox.alive():
            sandbox.kill()
            return
        sandbox.idle_since = time.monotonic()
        with self._lock:
            self._idle.append(sandbox)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sandbox in idle:
            sandbox.kill()


def kill_group(process: subprocess.Popen[bytes], before: Callable[[], None] | None = None) -> None:
    """SIGKILL the process group and reap it; ``before`` runs first (a throttle's SIGCONT)."""
    if before is not None:
        before()
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # exited meanwhile
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()
