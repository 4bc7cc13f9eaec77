"""A channel whose keys are spread over P hashed prefixes (fasdl.contract.keys.spread_key).

S3 serves at least 3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD requests per second per
partitioned prefix, and an application scales past that by spreading its requests over
prefixes ("Best practices design patterns: optimizing Amazon S3 performance",
https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html). The
runtime names its exchange keys as ever (``{run}/{epoch}/it/...``); this wrapper puts each
under its label, so K-REDUCE, the claims and every cleanup use the same names at any P, and
a prefix deletion covers every label.
"""

from __future__ import annotations

from collections.abc import Iterable

from fasdl.contract.keys import exchange_labels, spread_key
from fasdl.exchange.channel.base import Channel


class SpreadChannel(Channel):
    """``inner`` with every key under its hashed label, ``prefixes`` labels in all."""

    def __init__(self, inner: Channel, prefixes: int) -> None:
        self.labels = exchange_labels(prefixes)  # checks the range
        self.inner = inner
        self.prefixes = prefixes
        self.backoff = inner.backoff  # get() polls like the wrapped channel

    def _key(self, key: str) -> str:
        return spread_key(key, self.prefixes)

    def put(self, key: str, data: bytes | bytearray) -> None:
        self.inner.put(self._key(key), data)

    def put_if_absent(self, key: str, data: bytes | bytearray) -> bool:
        return self.inner.put_if_absent(self._key(key), data)

    def claim(self, key: str, token: bytes) -> bool:
        return self.inner.claim(self._key(key), token)

    def try_get(self, key: str) -> bytes | None:
        return self.inner.try_get(self._key(key))

    def delete(self, keys: Iterable[str]) -> None:
        self.inner.delete(self._key(key) for key in keys)

    def delete_prefix(self, prefix: str) -> int:
        """Every key under ``prefix`` below any label: one listing per label."""
        return sum(self.inner.delete_prefix(label + prefix) for label in self.labels)

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` below any label, named without its label."""
        return [key[len(label):] for label in self.labels
                for key in self.inner.list_keys(label + prefix)]

    @property
    def throttled_retries(self) -> int:
        return self.inner.throttled_retries

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"SpreadChannel({self.inner!r}, {self.prefixes} prefixes)"


def spread_keys(channel: Channel, prefixes: int) -> Channel:
    """``channel`` itself at one prefix, else wrapped."""
    return channel if prefixes == 1 else SpreadChannel(channel, prefixes)
