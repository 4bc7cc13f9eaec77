"""The exchange channel: put/get/delete of bytes by key, with deadlines and backoff.

Readers GET known keys (no LIST in the hot path). A key that does not exist yet is normal
while waiting: :meth:`Channel.get` retries with capped exponential backoff and full jitter
until the deadline, then raises :class:`ChannelTimeout`.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


class ChannelError(RuntimeError):
    """A channel operation failed for a reason other than a missing key."""


class ChannelTimeout(ChannelError):
    """A key did not appear before the deadline."""

    def __init__(self, key: str, waited_s: float) -> None:
        super().__init__(f"key {key!r} did not appear within {waited_s:.1f} s")
        self.key = key
        self.waited_s = waited_s


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with full jitter (sleep ~ U(0, min(cap, first·factor^n)))."""

    first_s: float = 0.005
    cap_s: float = 0.25
    factor: float = 2.0

    def delays(self, rng: random.Random | None = None) -> Iterable[float]:
        rng = rng or random.Random()
        window = self.first_s
        while True:
            window = min(self.cap_s, window)
            yield rng.uniform(0.0, window)
            # grown by multiplying, not factor**attempt: 2.0**1024 raised OverflowError after
            # about two minutes of polling, failing a run that waited on a restarting peer
            window *= self.factor


class Channel(ABC):
    """Byte store shared by the workers of one run."""

    backoff: Backoff = Backoff()

    @abstractmethod
    def put(self, key: str, data: bytes | bytearray) -> None:
        """Store ``data`` under ``key`` (overwrites)."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes | bytearray) -> bool:
        """Create ``key`` only if it does not exist; False if it did (nothing written)."""

    @abstractmethod
    def try_get(self, key: str) -> bytes | None:
        """The value of ``key``, or None if it does not exist (yet)."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Delete the keys; missing keys are ignored."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix`` (cleanup only, never in the hot path)."""

    @abstractmethod
    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix``, as this channel names them (cleanup only)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    @property
    def throttled_retries(self) -> int:
        """Requests the store throttled since the channel was made (S3's 503 Slow Down);
        0 where the store does not throttle this way."""
        return 0

    def claim(self, key: str, token: bytes) -> bool:
        """Create ``key`` holding ``token``; True if it now holds ours. A create whose reply
        was lost and was retried finds its own token, which still counts as ours."""
        return self.put_if_absent(key, token) or self.try_get(key) == token

    def get(self, key: str, deadline: float) -> bytes:
        """Wait for ``key`` until ``deadline`` (a ``time.monotonic()`` value)."""
        start = time.monotonic()
        delays: Iterator[float] | None = None
        while True:
            value = self.try_get(key)
            if value is not None:
                return value
            now = time.monotonic()
            if now >= deadline:
                raise ChannelTimeout(key, now - start)
            # made on the first miss, so a hit pays no RNG seeding (measured: docs/results.md,
            # "Measurements behind design choices")
            if delays is None:
                delays = iter(self.backoff.delays())
            time.sleep(min(next(delays), max(0.0, deadline - now)))
