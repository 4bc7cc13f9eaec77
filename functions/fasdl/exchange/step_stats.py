"""What one K-REDUCE iteration took (fasdl.exchange.kreduce reports one per step; the handlers'
metrics record them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepStats:
    """Wall-clock split of one iteration. ``idle_s`` is time spent waiting for keys."""

    iteration: int
    loss: float
    compute_s: float
    upload_s: float
    aggregate_s: float
    download_s: float
    idle_s: float
    bytes_up: int
    bytes_down: int

    @property
    def total_s(self) -> float:
        return self.compute_s + self.upload_s + self.aggregate_s + self.download_s + self.idle_s
