"""What the emulator reads of an event body: log file tags and the worker index."""

from __future__ import annotations

import json


def log_tag(body: bytes) -> str:
    """``-s00002-a0-w0003`` for a worker event, ``-<action>`` otherwise: readable log names."""
    try:
        event = json.loads(body or b"{}")
    except ValueError:
        return ""
    if not isinstance(event, dict):
        return ""
    segment, worker = event.get("segment"), event.get("worker")
    if isinstance(segment, dict) and isinstance(worker, int):
        return f"-s{segment.get('index', 0):05d}-a{segment.get('attempt', 0)}-w{worker:04d}"
    action = event.get("action")
    return f"-{action}" if isinstance(action, str) and action.isidentifier() else ""


def worker_of(body: bytes) -> int | None:
    try:
        event = json.loads(body or b"{}")
    except ValueError:
        return None
    worker = event.get("worker") if isinstance(event, dict) else None
    return worker if isinstance(worker, int) else None
