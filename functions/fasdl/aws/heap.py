"""Keep a worker's memory at what its batches need, step after step and warm start after warm start.

Lambda holds the whole process to the function's memory size, for every step of a segment and
for the next invocation in a reused sandbox. glibc's default allocator does not: it raises its
mmap threshold each time a large block is freed, after which activations of every size are
carved from one heap that fragments step by step: a worker's peak grows from step to step,
past its plan, and differs from run to run. With the mmap threshold fixed (every activation
above it is its own mapping, unmapped when freed) the peak stays put, run after run. Faulting
those pages in again at each step costs little once freed heap is kept (the trim threshold);
the fixed threshold alone, with glibc's small default trim threshold, slows every step.
Freed memory a previous invocation left behind (glibc keeps freed heap pages and one arena per
busy thread) would also count against the next one: a worker that fit its memory cold was
killed in its first warm invocation (measured: docs/results.md, "Measurements behind design
choices").

:func:`configure_allocator` (at import, before the worker starts its threads) caps glibc's
arenas and fixes its thresholds; :func:`release_memory` (at each invocation's start) collects
garbage and returns free heap pages to the system. Both are no-ops where glibc is absent.
"""

from __future__ import annotations

import ctypes
import functools
import gc

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
ARENAS = 2
# Setting it also turns off glibc's dynamic threshold, the source of the growth above.
MMAP_THRESHOLD_BYTES = 4 << 20
# Free heap kept for reuse instead of given back and faulted in again at the next step; a
# new invocation returns it all (release_memory).
TRIM_THRESHOLD_BYTES = 256 << 20


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, opened once. Not through ``ctypes.util.find_library``: that runs
    ``ldconfig -p`` in a child process, a fork of the whole worker at every invocation, which a
    memory limit that samples the sandbox's processes counts twice (seen killing a worker that
    fit: docs/results.md, "Measurements behind design choices")."""
    for name in ("libc.so.6", None):  # glibc by its soname; else the process's own symbols
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def configure_allocator(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas (one per concurrently allocating thread by default) and fix
    its mmap and trim thresholds. True when glibc took all three."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    settings = ((M_ARENA_MAX, arenas), (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
                (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    return all([mallopt(parameter, value) == 1 for parameter, value in settings])


def release_memory() -> bool:
    """Collect garbage, then give free heap pages back (glibc ``malloc_trim``)."""
    gc.collect()
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    return bool(trim is not None and trim(0) == 1)
