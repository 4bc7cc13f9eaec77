"""fasdl.aws.heap: glibc's allocator is tuned and trimmed (a no-op elsewhere)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from fasdl.aws import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only (Lambda is glibc)")
def test_arenas_are_capped_and_free_pages_returned() -> None:
    assert heap.configure_allocator() is True
    assert heap.release_memory() in (True, False)  # 1 only when pages were returned
    data = [bytearray(1 << 16) for _ in range(2000)]  # ~130 MB of small-ish blocks
    del data
    assert heap.release_memory() is True  # freed heap pages to give back


def test_no_child_process_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """At every invocation's start: a child would be a fork of the whole worker, which a
    sandbox memory limit that samples its processes counts twice (ctypes.util.find_library
    runs ldconfig)."""
    import subprocess

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"fasdl.aws.heap started a process: {args}")

    heap._libc.cache_clear()
    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
    heap.configure_allocator()
    heap.release_memory()
    assert heap._libc() is heap._libc()  # opened once per sandbox



# In a fresh interpreter, as a worker starts: blocks are only mapped when the heap cannot serve
# them, so a test process with freed heap to spare would prove nothing.
FREED_BLOCKS_SCRIPT = """
import sys
from pathlib import Path
from fasdl.aws import heap

def resident_mb():
    status = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024

if sys.argv[1] == "configured":
    assert heap.configure_allocator()
large = bytearray(24 << 20)  # mapped, then freed: raises glibc's dynamic threshold to 24 MiB
del large
before = resident_mb()
blocks = [bytearray(5 << 20) for _ in range(8)]  # 40 MiB in blocks above the fixed 4 MiB
grown = resident_mb() - before
del blocks
print(grown, resident_mb() - before)
"""


def _freed_blocks_mb(mode: str) -> tuple[float, float]:
    """(resident growth with 40 MiB of 5 MiB blocks live, resident growth after freeing them)."""
    functions = Path(__file__).resolve().parents[2] / "functions"
    output = subprocess.run([sys.executable, "-c", FREED_BLOCKS_SCRIPT, mode], check=True,
                            capture_output=True, text=True, cwd=functions).stdout
    grown, kept = (float(value) for value in output.split())
    return grown, kept


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only (Lambda is glibc)")
def test_large_blocks_are_returned_when_freed_whatever_was_freed_before() -> None:
    """glibc's default raises its mmap threshold to the size of each large block freed, after
    which blocks below it stay resident in the heap: a worker's peak grew step after step."""
    grown, kept = _freed_blocks_mb("default")
    assert grown > 35 and kept > 35  # the behaviour configure_allocator is there to stop
    grown, kept = _freed_blocks_mb("configured")
    assert grown > 35 and kept < 8  # unmapped at once, not kept in the heap
