"""A worker's time budget: stop before an iteration that would not leave time for the
checkpoint (:class:`TimeGuard`), and bound every wait for a peer (:func:`peer_wait_s`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fasdl.contract.settings import Settings


class SegmentTooLong(RuntimeError):
    """Too little time is left for the next iteration plus the checkpoint write."""


class TimeGuard:
    """Predicts whether one more iteration and the checkpoint still fit before the deadline."""

    def __init__(self, remaining_s: Callable[[], float], margin_s: float,
                 checkpoint_s: float) -> None:
        self.remaining_s = remaining_s
        self.margin_s = margin_s
        self.checkpoint_s = checkpoint_s
        self.recent: list[float] = []

    def observe(self, iteration_s: float) -> None:
        self.recent = [*self.recent[-4:], iteration_s]

    def reserve_s(self) -> float:
        """Time kept back for the checkpoint and the margin (bounds every wait)."""
        return self.checkpoint_s + self.margin_s

    def check(self, iteration: int) -> None:
        predicted = max(self.recent, default=0.0)
        left = self.remaining_s()
        needed = predicted + self.reserve_s()
        if left < needed:
            raise SegmentTooLong(
                f"{left:.1f} s left before iteration {iteration}, but one iteration "
                f"(~{predicted:.1f} s) + checkpoint (~{self.checkpoint_s:.1f} s) + margin "
                f"({self.margin_s:.1f} s) need {needed:.1f} s; retry the segment shorter")


# Peers may still be starting (a cold start next to a warm one) until every worker has waited
# on the others once: the first iteration's uploads, and under hap the merged shards loaded
# one iteration later, in the second.
START_ITERATIONS = 2


def peer_wait_s(settings: Settings, recent: list[float], left_s: float) -> float:
    """How long to wait for a peer's shard: long enough for staggered cold starts in the
    first :data:`START_ITERATIONS` iterations, a few slowest iterations after that, never
    past ``left_s``."""
    if len(recent) >= START_ITERATIONS:
        bound = max(settings.peer_wait_min_s, settings.peer_wait_factor * max(recent))
    else:
        bound = settings.peer_wait_start_s
    return max(1.0, min(bound, left_s))
