"""An in-process channel over a dict, for pure-logic unit tests (threads share one store).

Channels built on the same :class:`MemoryStore` see each other's keys, like workers sharing a
bucket; ``prefix`` namespaces keys exactly as in the S3 and Valkey channels.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable

from fasdl.exchange.channel.base import Channel


class MemoryStore:
    """The shared dict behind one or more MemoryChannels."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def list_keys(self, prefix: str) -> list[str]:
        return [key for key in self.keys() if key.startswith(prefix)]

    def keys(self) -> list[str]:
        """Every stored key, sorted (tests inspect what was written)."""
        with self.lock:
            return sorted(self.values)


class MemoryChannel(Channel):
    """Thread-safe dict channel. Values are copied to bytes so callers cannot alias them."""

    def __init__(self, prefix: str = "", store: MemoryStore | None = None) -> None:
        self.prefix = prefix
        self.store = store or MemoryStore()
        # Short aliases of the shared dict and lock (subclasses in tests read them too).
        self._store = self.store.values
        self._lock = self.store.lock

    def put(self, key: str, data: bytes | bytearray) -> None:
        value = bytes(data)
        with self._lock:
            self._store[self.prefix + key] = value

    def put_if_absent(self, key: str, data: bytes | bytearray) -> bool:
        value = bytes(data)
        with self._lock:
            if self.prefix + key in self._store:
                return False
            self._store[self.prefix + key] = value
            return True

    def try_get(self, key: str) -> bytes | None:
        with self._lock:
            return self._store.get(self.prefix + key)

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The value and an ETag as S3 makes one for a single PUT (the MD5 of the bytes)."""
        with self._lock:
            value = self._store.get(self.prefix + key)
        return None if value is None else (value, _etag(value))

    def put_if_match(self, key: str, data: bytes | bytearray, etag: str) -> bool:
        value = bytes(data)
        with self._lock:
            current = self._store.get(self.prefix + key)
            if current is None or _etag(current) != etag:
                return False
            self._store[self.prefix + key] = value
            return True

    def delete(self, keys: Iterable[str]) -> None:
        with self._lock:
            for key in keys:
                self._store.pop(self.prefix + key, None)

    def delete_prefix(self, prefix: str) -> int:
        full_prefix = self.prefix + prefix
        with self._lock:
            doomed = [key for key in self._store if key.startswith(full_prefix)]
            for key in doomed:
                del self._store[key]
        return len(doomed)

    def list_keys(self, prefix: str) -> list[str]:
        return [key for key in self.keys() if key.startswith(prefix)]

    def keys(self) -> list[str]:
        """This channel's keys (without its prefix), sorted."""
        with self._lock:
            return sorted(k[len(self.prefix):] for k in self._store
                          if k.startswith(self.prefix))


def _etag(value: bytes) -> str:
    return f'"{hashlib.md5(value, usedforsecurity=False).hexdigest()}"'
