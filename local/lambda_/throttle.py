"""A CPU cap for one process group, enforced from outside like Lambda's CFS bandwidth control.

Lambda gives a function M/1769 vCPU through a CFS quota: each period the function may run for
share × period of CPU time, then it waits for the next period. Only CPU actually used is
charged, so time blocked on I/O costs nothing. :class:`CpuThrottle` does the same from the
parent: a thread reads the group's consumed CPU time every ``tick_s`` and holds the group with
SIGSTOP while it has used more than ``share`` × elapsed wall time (plus one ``burst_s``
allowance), SIGCONT once it is back under. Unused quota is not banked beyond ``burst_s``, as
CFS does not carry quota across periods either.

Linux only (reads ``/proc``). CPU times there come in clock ticks (10 ms), so the cap is exact
on average and jitters by about one tick in the short term.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

_TICKS_PER_S = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def available_cores() -> int:
    """Cores this process may run on (affinity-aware where the OS tells)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (which may hold spaces and ')'):
    state, ppid, pgrp, session, ..."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def processes_with(field: int, value: int) -> set[int]:
    """Every process whose :func:`stat_fields` ``field`` is ``value`` (2: its process group,
    3: its session): a full /proc scan, several ms, since task/*/children is often missing."""
    found: set[int] = set()
    with contextlib.suppress(OSError), os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                fields = stat_fields(int(entry.name))
                if fields is not None and len(fields) > field and fields[field] == str(value):
                    found.add(int(entry.name))
    return found


def _cpu_of(fields: list[str]) -> float:
    # state is fields[0]; utime, stime, cutime, cstime are stat fields 14-17 (here 11-14).
    # cutime/cstime hold reaped children, so CPU moves there, never vanishes, on a reap.
    return sum(int(value) for value in fields[11:15]) / _TICKS_PER_S


class CpuThrottle:
    """Caps the process group ``pgid`` (a session leader's pid) at ``share`` CPUs.

    Use as a context manager or with :meth:`start` / :meth:`stop`; :meth:`stop` always leaves
    the group running (SIGCONT), so a later kill or wait cannot hang on a stopped process.
    """

    def __init__(self, pgid: int, share: float, *, tick_s: float = 0.01,
                 burst_s: float = 0.02, scan_s: float = 0.5) -> None:
        if share <= 0:
            raise ValueError(f"share must be > 0 CPUs, got {share}")
        self.pgid = pgid
        self.share = share
        self.tick_s = tick_s
        self.burst_s = burst_s
        self.scan_s = scan_s  # how often to look for new processes in the group
        self.stopped_s = 0.0  # wall time the group was held, for logs and tests
        self.stops = 0
        self._members: set[int] = {pgid}
        self._done = threading.Event()
        self._held = False
        self._lock = threading.Lock()  # _held and the signals, shared with stop()
        self._thread = threading.Thread(target=self._run, name=f"cpu-throttle-{pgid}",
                                        daemon=True)

    def start(self) -> CpuThrottle:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End throttling and continue the group if it is held (idempotent)."""
        self._done.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        self._release()

    def __enter__(self) -> CpuThrottle:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- measurement ------------------------------------------------------------------------
    def _scan(self) -> None:
        self._members = {self.pgid} | processes_with(2, self.pgid)

    def cpu_seconds(self) -> float | None:
        """CPU time used by the group's processes and the children they reaped; None once the
        leader has exited."""
        leader = stat_fields(self.pgid)
        if leader is None or leader[0] in "ZX":
            return None
        total = _cpu_of(leader)
        for pid in self._members - {self.pgid}:
            fields = stat_fields(pid)
            # A zombie still holds its time until reaped (then it is in the reaper's cutime);
            # the group check skips a pid reused by another process since the last scan.
            if fields is not None and len(fields) > 14 and fields[2] == str(self.pgid):
                total += _cpu_of(fields)
        return total

    # ---- control ----------------------------------------------------------------------------
    def _signal(self, signum: int) -> bool:
        try:
            os.killpg(self.pgid, signum)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _hold(self) -> None:
        with self._lock:
            if not self._held and not self._done.is_set() and self._signal(signal.SIGSTOP):
                self._held = True
                self.stops += 1

    def _release(self) -> None:
        with self._lock:
            if self._held:
                self._signal(signal.SIGCONT)
                self._held = False

    def _run(self) -> None:
        if self.share >= available_cores():
            return  # the host cannot give more than this anyway
        self._scan()
        used = self.cpu_seconds()
        if used is None:
            return
        last_wall = last_scan = time.monotonic()
        credit = self.burst_s
        while not self._done.wait(self.tick_s):
            now = time.monotonic()
            if now - last_scan >= self.scan_s:
                self._scan()
                last_scan = now
            current = self.cpu_seconds()
            if current is None:
                break
            # Debt carries over (the cap holds on average); credit is capped at one burst.
            credit = min(credit + self.share * (now - last_wall) - (current - used),
                         self.burst_s)
            if self._held:
                self.stopped_s += now - last_wall
            used, last_wall = current, now
            if credit < 0:
                self._hold()
            else:
                self._release()
        self._release()
