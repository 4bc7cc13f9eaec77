"""Handlers that use memory, for tests/local/test_lambda_faults_*.py. Standard library only, so
the child's own footprint stays that of a bare interpreter (~10 MB).

Sizes are MiB. ``bytearray(n)`` zero-fills its buffer, so every page is touched and resident.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20


def _grow(total_mb: int, step_mb: int = 8, pause_s: float = 0.0) -> list[bytearray]:
    chunks = []
    for _ in range(max(1, total_mb // step_mb)):
        chunks.append(bytearray(step_mb * MIB))
        if pause_s:
            time.sleep(pause_s)
    return chunks


def grow(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Grow to ``total_mb`` in ``step_mb`` chunks (``pause_s`` between), hold ``hold_s``."""
    chunks = _grow(int(event["total_mb"]), int(event.get("step_mb", 8)),
                   float(event.get("pause_s", 0.0)))
    time.sleep(float(event.get("hold_s", 0.0)))
    return {"held_mb": sum(len(chunk) for chunk in chunks) // MIB}


def spike(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Allocate ``total_mb`` at once, free it, return at once: a peak between two samples."""
    chunk = bytearray(int(event["total_mb"]) * MIB)
    del chunk  # a large buffer is unmapped on free; the kernel keeps the peak (VmHWM)
    return {"freed": True}


def fork_helper(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Fork a helper holding ``helper_mb``, hold ``own_mb`` here; neither alone is over M, the
    two together are. The helper's pid goes to ``pid_file``; both wait ``hold_s``."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the helper: stays in the invocation's session and process group
        os.close(ready_r)
        held = _grow(int(event["helper_mb"]))
        os.write(ready_w, b"1")
        time.sleep(float(event.get("hold_s", 30.0)))
        os._exit(0 if held else 1)
    os.close(ready_w)
    Path(event["pid_file"]).write_text(str(pid))
    os.read(ready_r, 1)  # the helper holds its memory now
    chunks = _grow(int(event["own_mb"]))
    time.sleep(float(event.get("hold_s", 30.0)))
    os.waitpid(pid, 0)
    return {"own_mb": sum(len(chunk) for chunk in chunks) // MIB}


def record(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Append the request id to the file ``FAULTS_CALLS_FILE`` names: proof the handler ran."""
    with Path(os.environ["FAULTS_CALLS_FILE"]).open("a") as calls:
        calls.write(context.aws_request_id + "\n")
    return {"ran": context.aws_request_id, "event": event}
