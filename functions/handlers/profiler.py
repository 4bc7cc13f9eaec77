"""PLACEHOLDER profiler handler so the stack synthesizes; replaced by the runtime implementation.

The event/return contract is documented in infra/workflow.py and the infra report.
"""

from __future__ import annotations

from typing import Any


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    return {"placeholder": "profiler", "action": event.get("action")}
