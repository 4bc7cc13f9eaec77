"""Keep a warm sandbox's memory at what the next invocation needs.

Lambda reuses an execution environment for the next invocation and holds the whole process
to the function's memory size, so memory one invocation freed but the C allocator kept (glibc
keeps freed heap pages and one arena per busy thread) counts against the next one. Measured in
the local emulator: workers at M = 384 MB peaked at 371 MB cold and were killed at 385 MB in
their first warm invocation. :func:`limit_arenas` (at import, before the worker starts its
threads) caps glibc's arenas; :func:`release_memory` (at each invocation's start) collects
garbage and returns free heap pages to the system. Both are no-ops where glibc is absent.
"""

from __future__ import annotations

import ctypes
import functools
import gc

M_ARENA_MAX = -8  # glibc's mallopt parameter
ARENAS = 2


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, opened once. Not through ``ctypes.util.find_library``: that runs
    ``ldconfig -p`` in a child process, a fork of the whole worker at every invocation, which a
    memory limit that samples the sandbox's processes counts twice (seen: a 376 MB worker
    killed at 752 MB of 384)."""
    for name in ("libc.so.6", None):  # glibc by its soname; else the process's own symbols
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas (one per concurrently allocating thread by default)."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt is not None and mallopt(M_ARENA_MAX, arenas) == 1)


def release_memory() -> bool:
    """Collect garbage, then give free heap pages back (glibc ``malloc_trim``)."""
    gc.collect()
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    return bool(trim is not None and trim(0) == 1)
