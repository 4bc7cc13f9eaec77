"""fasdl.heap: glibc's allocator is tuned and trimmed (a no-op elsewhere)."""

from __future__ import annotations

import platform

import pytest

from fasdl import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only (Lambda is glibc)")
def test_arenas_are_capped_and_free_pages_returned() -> None:
    assert heap.limit_arenas() is True
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
        raise AssertionError(f"fasdl.heap started a process: {args}")

    heap._libc.cache_clear()
    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
    heap.limit_arenas()
    heap.release_memory()
    assert heap._libc() is heap._libc()  # opened once per sandbox
