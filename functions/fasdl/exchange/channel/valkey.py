"""Valkey channel (ElastiCache Serverless Valkey, or a local valkey-server/redis-server).

Every key is written with SET ... EX ttl, so an abandoned run cleans itself up. Connection
errors and timeouts are retried with backoff (the client reconnects on the next attempt, so a
server restart between two operations is survived); anything else, or an error that outlasts
the retries, surfaces as ChannelError naming the endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, TypeVar

import redis
import redis.connection
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, RedisClusterException, RedisError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from fasdl.exchange.channel.base import Backoff, Channel, ChannelError

DEFAULT_TTL_S = 3600
DELETE_BATCH = 500  # well under ElastiCache Serverless' 3,999 arguments per request
# RedisClusterException is raised when no node of the slot map answers (e.g. mid-restart).
_TRANSIENT = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError,
              RedisClusterException)
_GLOB_SPECIALS = frozenset("*?[]\\")

# Transient-error retries: the client reconnects on each attempt (e.g. after a restart).
_RETRY_BACKOFF = Backoff(first_s=0.05, cap_s=1.0)

_T = TypeVar("_T")

# Replies are parsed by hiredis (functions/requirements.txt): redis-py's Python parser spends
# several times its CPU per MB of a GET, which a small Lambda share feels. Commands keep
# redis-py's own packer, which sends a large value as a buffer of its own; hiredis' packer
# copies it into the command, several times the CPU per MB of a SET (measured:
# docs/results.md, "Measurements behind design choices"). A connection picks its packer from
# this flag when it is made (plain and cluster clients alike) and its parser when
# redis.connection was imported; redis is pinned, and tests/integration/test_channels.py
# checks both on every Valkey backend.
redis.connection.HIREDIS_AVAILABLE = False  # type: ignore[attr-defined]  # imported there


def escape_glob(text: str) -> str:
    """``text`` as a literal inside a SCAN MATCH pattern."""
    return "".join("\\" + char if char in _GLOB_SPECIALS else char for char in text)


def _batched(items: Iterable[bytes | str], size: int) -> Iterator[list[bytes | str]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


# Waiting for a peer's key: a Valkey GET is a round trip of milliseconds and a miss costs one
# ECPU, so poll 10x sooner than the S3 default (5 ms, where every GET is billed per request),
# whose first delay was a visible share of a small emulated iteration (measured:
# docs/results.md, "Measurements behind design choices").
POLL_BACKOFF = Backoff(first_s=0.0005, cap_s=0.05)


class ValkeyChannel(Channel):
    """Keys are stored as ``prefix + key`` (prefix used verbatim) with a TTL of ``ttl_s``."""

    backoff = POLL_BACKOFF

    def __init__(
        self,
        host: str,
        port: int = 6379,
        *,
        prefix: str = "",
        ttl_s: int = DEFAULT_TTL_S,
        tls: bool = False,
        cluster: bool = False,
        ca_certs: str | None = None,
        username: str | None = None,
        password: str | None = None,
        socket_timeout_s: float = 60.0,
        retry_window_s: float = 15.0,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be a positive number of seconds, got {ttl_s}")
        if retry_window_s < 0:
            raise ValueError(f"retry_window_s must be >= 0, got {retry_window_s}")
        self.prefix = prefix
        self.ttl_s = int(ttl_s)
        self.retry_window_s = retry_window_s
        scheme = "rediss" if tls else "redis"
        self.endpoint = f"{scheme}://{host}:{port}" + (" (cluster)" if cluster else "")
        options: dict[str, Any] = {
            "host": host,
            "port": port,
            "username": username,
            "password": password,
            "socket_timeout": socket_timeout_s,
            "socket_connect_timeout": 5.0,
            # One quick in-client retry; the channel's own loop below spans longer outages.
            "retry": Retry(ExponentialWithJitterBackoff(cap=0.2, base=0.01), 1),
        }
        if tls:
            options.update(ssl=True, ssl_ca_certs=ca_certs, ssl_cert_reqs="required")
        try:
            # RedisCluster connects at once to learn the slot map; redis.Redis is lazy.
            self._client: Any = RedisCluster(**options) if cluster else redis.Redis(**options)
        except (RedisError, RedisClusterException) as exc:
            raise ChannelError(f"valkey {self.endpoint}: cannot connect: {exc}") from exc

    def _call(self, action: str, key: str, operation: Callable[[], _T]) -> _T:
        give_up_at = time.monotonic() + self.retry_window_s
        delays: Iterator[float] | None = None  # made on the first failure only (seeds an RNG)
        attempt = 0
        while True:
            attempt += 1
            try:
                return operation()
            except _TRANSIENT as exc:
                delays = delays or iter(_RETRY_BACKOFF.delays())
                delay = next(delays)
                if time.monotonic() + delay > give_up_at:
                    raise ChannelError(
                        f"valkey {self.endpoint}: {action} {key!r} failed after {attempt} "
                        f"attempts in {self.retry_window_s:.0f} s: {exc}"
                    ) from exc
                time.sleep(delay)
            except RedisError as exc:
                raise ChannelError(
                    f"valkey {self.endpoint}: {action} {key!r} failed: {exc}"
                ) from exc

    def put(self, key: str, data: bytes | bytearray) -> None:
        full_key = self.prefix + key
        self._call("put", key, lambda: self._client.set(full_key, data, ex=self.ttl_s))

    def put_if_absent(self, key: str, data: bytes | bytearray) -> bool:
        full_key = self.prefix + key
        created = self._call("put_if_absent", key,
                             lambda: self._client.set(full_key, data, ex=self.ttl_s, nx=True))
        return bool(created)

    def try_get(self, key: str) -> bytes | None:
        full_key = self.prefix + key
        value: bytes | None = self._call("get", key, lambda: self._client.get(full_key))
        return value

    def delete(self, keys: Iterable[str]) -> None:
        self._delete_full_keys(self.prefix + key for key in keys)

    def _delete_full_keys(self, full_keys: Iterable[bytes | str]) -> int:
        deleted = 0
        for batch in _batched(full_keys, DELETE_BATCH):
            deleted += self._delete_batch(batch)
        return deleted

    def _delete_batch(self, batch: list[bytes | str]) -> int:
        removed: int = self._call("delete", str(batch[0]), lambda: self._client.delete(*batch))
        return removed

    def ttl(self, key: str) -> int:
        """Seconds left before ``key`` expires (-1: no TTL, -2: missing)."""
        full_key = self.prefix + key
        remaining: int = self._call("ttl", key, lambda: self._client.ttl(full_key))
        return remaining

    def delete_prefix(self, prefix: str) -> int:
        return self._delete_full_keys(self._scan(prefix))

    def list_keys(self, prefix: str) -> list[str]:
        return [key.decode()[len(self.prefix):] for key in self._scan(prefix)]

    def _scan(self, prefix: str) -> list[bytes]:
        # SCAN visits every primary in cluster mode (redis-py's RedisCluster.scan_iter).
        pattern = escape_glob(self.prefix + prefix) + "*"
        keys: list[bytes] = self._call(
            "scan", pattern, lambda: list(self._client.scan_iter(match=pattern, count=1000))
        )
        return keys

    def close(self) -> None:
        self._client.close()
