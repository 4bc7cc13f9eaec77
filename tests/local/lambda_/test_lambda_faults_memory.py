"""The emulator holds each invocation to its memory size M like Lambda: the process group is
killed past M × 2^20 bytes and the invocation fails with Runtime.OutOfMemory; every invocation
records its peak RSS. Stub handlers grow bytearrays (tests/local/stubs/lambda_faults_stubs.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from infra import lambda_errors
from local.__main__ import build_parser
from local.lambda_.emulator import LambdaEmulator
from local.lambda_.invocation import FunctionSpec, Invocation
from local.lambda_.lambda_speed import LambdaEmulation
from local.lambda_.memory_watchdog import MIB, MemoryWatchdog, read_memory
from local.run.run_options import RunOptions
from tests.local.conftest import STUBS

M = 128  # MB: a bare interpreter is ~10 MB of it


_LOGS: dict[str, str] = {}  # request id -> the invocation's log (its folder is removed)


def _invoke(handler: str, event: dict[str, Any], *, memory_mb: int = M,
            **options: Any) -> Invocation:
    spec = FunctionSpec(name="Fn", handler=f"lambda_faults_stubs.{handler}", code_dir=STUBS,
                        timeout_s=30, memory_mb=memory_mb)
    with LambdaEmulator({"Fn": spec}, **options) as emulator:
        invocation = emulator.invoke("Fn", event)
        assert emulator.invocations == [invocation] and invocation.log_path is not None
        _LOGS[invocation.request_id] = invocation.log_path.read_text()
    return invocation


def _log(invocation: Invocation) -> str:
    return _LOGS[invocation.request_id]


def _assert_out_of_memory(invocation: Invocation) -> None:
    assert invocation.function_error == "Unhandled"
    assert invocation.error_type == lambda_errors.OUT_OF_MEMORY and invocation.out_of_memory
    assert json.loads(invocation.payload) == {
        "errorType": lambda_errors.OUT_OF_MEMORY,
        "errorMessage": f"RequestId: {invocation.request_id} Error: Runtime exited with error: "
                        "signal: killed"}
    assert invocation.peak_rss_mb is not None and invocation.peak_rss_mb > M
    assert f"Memory Size: {M} MB Max Memory Used: {invocation.peak_rss_mb:.1f} MB" in \
        _log(invocation)


def test_a_child_past_its_memory_is_killed() -> None:
    """Growing to 4×M in 8-MB steps: killed on the way, within one sampling interval or so of
    crossing M (~1 GB/s of page faults here: tens of MB past M, never the whole 4×M)."""
    began = time.monotonic()
    invocation = _invoke("grow", {"total_mb": 4 * M, "hold_s": 20})
    _assert_out_of_memory(invocation)
    # Hang bounds only: killed while growing (about a second), so before its 20 s hold would
    # end, and the emulator returns at once. How far past M it got is the peak, below.
    assert invocation.duration_s < 20 and time.monotonic() - began < 60
    assert invocation.peak_rss_mb is not None and invocation.peak_rss_mb < 2 * M
    log = _log(invocation)
    assert "killed it (Runtime.OutOfMemory)" in log
    # the log names each process counted, with its memory, to tell a real leak from a miscount
    assert re.search(r"member pid \d+: VmRSS \d+\.\d MB, VmHWM \d+\.\d MB: \S*python", log), log


def test_a_cpu_capped_child_is_killed_too() -> None:
    """Under --emulate-lambda's CPU cap (0.07 vCPU at 128 MB, the group held with SIGSTOP
    most of the time) the overrun is slower but ends the same way, the group not left held."""
    invocation = _invoke("grow", {"total_mb": 4 * M, "hold_s": 20}, emulation=LambdaEmulation())
    _assert_out_of_memory(invocation)
    assert "killed it (Runtime.OutOfMemory)" in _log(invocation)  # live, not at the end
    # before the 20 s hold would end (about 4 s): the cap sets the pace, not the load, as
    # long as the child's fair share of the machine stays above 0.07 vCPU
    assert "CPU capped at 0.07 vCPU" in _log(invocation) and invocation.duration_s < 20


def test_a_child_under_its_memory_runs_and_reports_its_peak() -> None:
    invocation = _invoke("grow", {"total_mb": 40, "hold_s": 0.3})
    assert invocation.function_error is None and json.loads(invocation.payload) == {
        "held_mb": 40}
    assert invocation.memory_mb == M
    assert invocation.peak_rss_mb is not None and 40 < invocation.peak_rss_mb < 80
    assert "memory limit on" in _log(invocation) and "out of memory" not in _log(invocation)


@pytest.mark.parametrize("limit", [True, False])
def test_a_forked_helper_counts_for_the_group(tmp_path: Path, limit: bool) -> None:
    """Helper 72 MB + handler 64 MB: each under M, together over it; the whole group dies."""
    pid_file = tmp_path / "helper.pid"
    invocation = _invoke("fork_helper", {"helper_mb": 72, "own_mb": 64, "hold_s": 1 if not limit
                                         else 30, "pid_file": str(pid_file)},
                         memory_limit=limit)
    assert invocation.peak_rss_mb is not None and invocation.peak_rss_mb > M
    if not limit:  # measured, not enforced
        assert invocation.function_error is None, invocation.payload
        assert "memory limit off" in _log(invocation)
        return
    _assert_out_of_memory(invocation)
    assert invocation.duration_s < 20  # a hang bound: killed growing, not at its 30 s hold
    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 30  # a hang bound: SIGKILL to the group acts at once
    while (memory := read_memory(helper)) is not None and not memory.zombie:
        assert time.monotonic() < deadline, "the helper survived the group kill"
        time.sleep(0.05)


def test_a_peak_after_the_last_sample_still_fails_the_invocation() -> None:
    """Sampling too slow to see it (one sample per 60 s): the child's own VmHWM, reported at
    the end, shows it went past M, so the invocation fails as Lambda would have killed it."""
    invocation = _invoke("spike", {"total_mb": 2 * M}, memory_tick_s=60)
    _assert_out_of_memory(invocation)
    assert "between samples" in _log(invocation)


def test_a_spike_between_samples_is_seen_at_the_next_one() -> None:
    """A process that went past M and freed it: its VmHWM still says so at the next sample."""
    child = subprocess.Popen(
        [sys.executable, "-c", f"import sys, time\nb = bytearray({2 * M} << 20)\ndel b\n"
                               "print('freed', flush=True)\ntime.sleep(30)"],
        stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"freed\n"
        watchdog = MemoryWatchdog(child.pid, M)  # not started: one sample by hand
        memory = read_memory(child.pid)
        assert memory is not None and memory.rss < M * MIB < memory.hwm
        watchdog.sample()
        assert watchdog.killed and watchdog.peak_bytes > M * MIB
        assert child.wait(timeout=5) == -9  # SIGKILL
    finally:
        child.kill()
        child.wait()


def test_the_limit_is_on_by_default() -> None:
    assert LambdaEmulator({}).memory_limit and RunOptions().memory_limit
    args = build_parser().parse_args(["run"])
    assert args.memory_limit == "on"
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", "--memory-limit", "maybe"])
    assert exited.value.code == 2
