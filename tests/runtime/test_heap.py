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
