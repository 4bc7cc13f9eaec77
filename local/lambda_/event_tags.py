"""What the emulator reads of an event body: log file tags, the action and the worker index."""

from __future__ import annotations

import json
from typing import Any


def _event(body: bytes) -> dict[str, Any]:
    try:
        event = json.loads(body or b"{}")
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def action_of(body: bytes) -> str | None:
    """The event's ``action`` (``"next"``), or None."""
    action = _event(body).get("action")
    return action if isinstance(action, str) else None


def log_tag(body: bytes) -> str:
    """``-s00002-a0-w0003`` for a worker event, ``-<action>`` otherwise: readable log names."""
    event = _event(body)
    segment, worker = event.get("segment"), event.get("worker")
    if isinstance(segment, dict) and isinstance(worker, int):
        return f"-s{segment.get('index', 0):05d}-a{segment.get('attempt', 0)}-w{worker:04d}"
    action = action_of(body)
    return f"-{action}" if action is not None and action.isidentifier() else ""


def worker_of(body: bytes) -> int | None:
    worker = _event(body).get("worker")
    return worker if isinstance(worker, int) else None
