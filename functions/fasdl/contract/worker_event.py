"""The worker's event (fasdl/contract/events.py WorkerPayload): parsed and checked field by field.

Stdlib only, like the contract itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fasdl.contract.events import TRAIN_ACTION
from fasdl.contract.fields import is_int_at_least


class WorkerEventError(ValueError):
    """The worker's event does not match the contract; the message names the field."""


@dataclass(frozen=True)
class WorkerEvent:
    run_id: str
    plan_key: str
    index: int
    start_iteration: int
    iterations: int
    attempt: int
    epoch: int
    resume_epoch: int
    worker: int

    @classmethod
    def parse(cls, event: Mapping[str, Any]) -> WorkerEvent:
        if event.get("action", TRAIN_ACTION) != TRAIN_ACTION:
            raise WorkerEventError(f"event field 'action': must be 'train', "
                                   f"got {event.get('action')!r}")
        segment = event.get("segment")
        if not isinstance(segment, dict):
            raise WorkerEventError("event field 'segment': must be an object")
        values: dict[str, Any] = {}
        for name, source, low in (("index", segment, 0), ("start_iteration", segment, 0),
                                  ("iterations", segment, 1), ("attempt", segment, 0),
                                  ("epoch", segment, 1), ("resume_epoch", segment, 0),
                                  ("worker", event, 0)):
            value = source.get(name)
            if not is_int_at_least(value, low):
                where = "worker" if name == "worker" else f"segment.{name}"
                raise WorkerEventError(f"event field '{where}': must be an integer >= {low}, "
                                       f"got {value!r}")
            values[name] = value
        for name in ("run_id", "plan_key"):
            if not isinstance(event.get(name), str) or not event[name]:
                raise WorkerEventError(f"event field '{name}': must be a non-empty string")
            values[name] = event[name]
        return cls(**values)

    def segment(self) -> dict[str, int]:
        """The segment as the run state names it (results and logs)."""
        return {"index": self.index, "start_iteration": self.start_iteration,
                "iterations": self.iterations, "attempt": self.attempt, "epoch": self.epoch}
