"""A clock whose sleep only advances it: the bandwidth shaper's arithmetic without waiting
(test_lambda_speed.py, test_shaping_duplex.py)."""

from __future__ import annotations


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
