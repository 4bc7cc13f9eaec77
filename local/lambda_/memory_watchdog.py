"""A memory limit for one invocation's processes, enforced from outside as Lambda does.

Lambda gives a function M MB for its whole sandbox; when the function's processes use more, the
runtime is killed and the invocation fails with ``Runtime.OutOfMemory`` ("Runtime exited with
error: signal: killed"). :class:`MemoryWatchdog` does the same for an emulated invocation: a
thread in the parent reads, every ``tick_s`` (25 ms), ``/proc/<pid>/status`` of each process in
the invocation's session (the child is a session leader) and SIGKILLs the whole process group
once the group uses more than M × 2^20 bytes. The group's use at a sample is the larger of:

* the sum of the members' resident sets (``VmRSS``), and
* any one member's peak resident set so far (``VmHWM``): the kernel keeps it, so a spike of one
  process between two samples is still seen at the next one.

Members are the leader's descendants (``/proc/<pid>/task/*/children``, every ``tree_s``,
0.1 s) plus a scan of ``/proc`` for the session (every ``scan_s``, 5 s: a scan costs far more
than a tree walk, docs/results.md, "Measurements behind design choices"; it finds
orphans reparented away from the leader). Linux only. docs/emulation.md says why 25 ms and
what sampling can miss.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from local.lambda_.throttle import processes_with, stat_fields

MIB = 1 << 20
DEFAULT_TICK_S = 0.025


@dataclass(frozen=True)
class ProcessMemory:
    """One process's memory and session, from ``/proc/<pid>/status``."""

    rss: int  # bytes resident now
    hwm: int  # bytes resident at the process's peak (since its last exec)
    session: int
    zombie: bool


def read_memory(pid: int) -> ProcessMemory | None:
    """None when the process is gone (or /proc is not there)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    state = _field(text, "State") or ""
    # NSsid (Linux 4.1+): the session in each PID namespace, this /proc's namespace first.
    nssid = _field(text, "NSsid")
    session = nssid.split()[:1] if nssid is not None else _stat_session(pid)
    return ProcessMemory(_kib(_field(text, "VmRSS")), _kib(_field(text, "VmHWM")),
                         int(session[0]) if session else 0, state.lstrip()[:1] in ("Z", "X"))


def _field(text: str, key: str) -> str | None:
    """The value of ``key:`` in a /proc status text (found, not split: this runs 40×/s)."""
    start = text.find(f"\n{key}:")
    if start < 0:
        return None
    end = text.find("\n", start + 1)
    return text[start + len(key) + 2:end if end >= 0 else len(text)]


def _kib(value: str | None) -> int:
    """``"   1234 kB"`` in bytes; 0 when absent (a zombie has no memory lines)."""
    parts = value.split() if value else []
    return int(parts[0]) * 1024 if parts else 0


def _stat_session(pid: int) -> list[str]:
    return (stat_fields(pid) or [])[3:4]  # state ppid pgrp session ...


def _children(pid: int) -> set[int]:
    """Children of every thread of ``pid`` (a fork belongs to the thread that made it)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found.update(int(child) for child in
                             Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
    return found


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it in the process tree."""
    seen, todo = {pid}, [pid]
    while todo:
        for child in _children(todo.pop()) - seen:
            seen.add(child)
            todo.append(child)
    return seen


def session_members(session: int) -> set[int]:
    """Every process of ``session``: a full ``/proc`` scan (several ms, so not every tick)."""
    return processes_with(3, session)


_HAS_CHILDREN_FILES = Path(f"/proc/self/task/{os.getpid()}/children").exists()


class MemoryWatchdog:
    """Watches the session led by ``pid``; with ``limit_mb``, kills its group past the limit.

    Without a limit it only measures (:attr:`peak_bytes`). Use :meth:`start` / :meth:`stop`
    or as a context manager; the thread also ends by itself once the leader has exited.
    """

    def __init__(self, pid: int, limit_mb: int | None, *, tick_s: float = DEFAULT_TICK_S,
                 tree_s: float = 0.1, scan_s: float = 5.0) -> None:
        if tick_s <= 0:
            raise ValueError(f"tick_s must be > 0 s, got {tick_s}")
        self.pid = pid
        self.limit_mb = limit_mb
        self.tick_s = tick_s
        self.tree_s = tree_s
        # Without children files only the scan finds helpers: do it more often then.
        self.scan_s = scan_s if _HAS_CHILDREN_FILES else min(scan_s, 0.25)
        self.peak_bytes = 0  # the group's largest use seen (see the module docstring)
        self.killed_at_bytes: int | None = None  # the use that got the group killed
        # at the kill: each member's (pid, VmRSS, VmHWM, command line), to tell why
        self.killed_members: list[tuple[int, int, int, str]] = []
        self.samples = 0
        self._members: set[int] = {pid}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"memory-watchdog-{pid}",
                                        daemon=True)

    @property
    def limit_bytes(self) -> int | None:
        return None if self.limit_mb is None else self.limit_mb * MIB

    @property
    def killed(self) -> bool:
        return self.killed_at_bytes is not None

    @property
    def peak_mb(self) -> float:
        return self.peak_bytes / MIB

    def start(self) -> MemoryWatchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End watching (idempotent); the last sample's peak stays."""
        self._done.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> MemoryWatchdog:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- sampling -------------------------------------------------------------------------
    def sample(self) -> bool:
        """Take one sample; False once the leader has exited."""
        total = highest = 0
        live: list[tuple[int, ProcessMemory]] = []
        for pid in sorted(self._members):
            memory = read_memory(pid)
            # The session check drops a pid that another process reuses after an exit.
            if memory is None or memory.zombie or memory.session != self.pid:
                if pid != self.pid:
                    self._members.discard(pid)
                continue
            live.append((pid, memory))
            total += memory.rss
            highest = max(highest, memory.hwm)
        self.samples += 1
        used = max(total, highest)
        self.peak_bytes = max(self.peak_bytes, used)
        limit = self.limit_bytes
        leader_alive = any(pid == self.pid for pid, _ in live)
        if leader_alive and limit is not None and used > limit and not self.killed:
            self.killed_at_bytes = used
            self.killed_members = [(pid, memory.rss, memory.hwm, _command(pid))
                                   for pid, memory in live]
            # The group, and members that moved to another group of the session. SIGKILL
            # also ends processes the CPU cap holds with SIGSTOP.
            with contextlib.suppress(ProcessLookupError, PermissionError):  # exited meanwhile
                os.killpg(self.pid, signal.SIGKILL)
            for pid, _ in live:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        return leader_alive

    def _run(self) -> None:
        last_tree = last_scan = time.monotonic()
        if _HAS_CHILDREN_FILES:
            self._members |= descendants(self.pid)
        while self.sample() and not self.killed and not self._done.wait(self.tick_s):
            now = time.monotonic()
            if _HAS_CHILDREN_FILES and now - last_tree >= self.tree_s:
                self._members |= descendants(self.pid)
                last_tree = now
            if now - last_scan >= self.scan_s:
                self._members |= session_members(self.pid)
                last_scan = now


def _command(pid: int) -> str:
    """A process's command line, shortened for a log line ('' once it is gone)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    return b" ".join(words).decode(errors="replace").strip()[:120]


def report_lines(request_id: str, duration_s: float, memory_mb: int, watchdog: MemoryWatchdog,
                 peak: int, over: bool) -> str:
    """Lambda's REPORT fields, and why the invocation was killed if it was (``over``: its
    peak exceeded M between samples)."""
    lines = []
    if watchdog.killed_at_bytes is not None:
        lines.append(f"[local emulator] out of memory: the process group used "
                     f"{watchdog.killed_at_bytes / MIB:.1f} MB > memory size {memory_mb} MB: "
                     "killed it (Runtime.OutOfMemory)")
        lines += [f"[local emulator]   member pid {pid}: VmRSS {rss / MIB:.1f} MB, VmHWM "
                  f"{hwm / MIB:.1f} MB: {command}"
                  for pid, rss, hwm, command in watchdog.killed_members]
    elif over:
        lines.append(f"[local emulator] out of memory: the peak {peak / MIB:.1f} MB exceeded "
                     f"the memory size {memory_mb} MB between samples; Lambda would have "
                     "killed it (Runtime.OutOfMemory)")
        lines += [f"[local emulator]   member pid {pid}: VmRSS {rss / MIB:.1f} MB, VmHWM "
                  f"{hwm / MIB:.1f} MB: {command}"
                  for pid, rss, hwm, command in watchdog.killed_members]
    limit = "on" if watchdog.limit_mb is not None else "off"
    lines.append(f"[local emulator] REPORT RequestId: {request_id} Duration: "
                 f"{duration_s * 1000:.2f} ms Memory Size: {memory_mb} MB Max Memory Used: "
                 f"{peak / MIB:.1f} MB (peak RSS of the process group, sampled every "
                 f"{watchdog.tick_s * 1000:.0f} ms; memory limit {limit})")
    return "".join(line + "\n" for line in lines)
