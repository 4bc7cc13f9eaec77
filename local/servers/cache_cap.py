"""A local Valkey held to a data cap as ElastiCache Serverless holds a cache to its data-storage
maximum: keys with a TTL (all of the exchange's) are evicted least-recently-used once the
*data* passes the cap.

Valkey's own ``maxmemory`` counts everything the server holds, its clients' query and reply
buffers included: measured here (Valkey 8.1, one-node cluster, 16 connections each SETting and
GETting one value), a connection keeps about 16 KB after a 1 KB value, 34 KB after 23 KB and
0.58 MB after 1 MB, after the key is gone; so a few dozen worker connections outweigh a small
model's whole exchange. ElastiCache Serverless's storage is the data stored (its metric
``BytesUsedForCache``: "the total number of bytes used by the data stored in your cache",
https://docs.amazonaws.cn/en_us/AmazonElastiCache/latest/mem-ug/serverless-metrics.html), not
connection buffers. So a watcher thread keeps ``maxmemory`` at the server's current non-data
memory (``used_memory - used_memory_dataset``, INFO memory, which holds the large buffers),
plus :data:`CONNECTION_ALLOWANCE` per connected client, or per expected client when more (the
small buffers INFO books as data; the workers' connections come and go between two readings),
plus the frames in flight (a frame being received sits in its client's query buffer before it
is data), plus the data cap, re-reading them every :data:`POLL_S`. For a model of a few KB the
allowance outweighs the cap; for the models the cap matters for, it is a few percent.
"""

from __future__ import annotations

import threading
from contextlib import closing
from types import TracebackType
from typing import Self

import redis

from local.servers.managed import HOST, RedisTlsClusterServer, ValkeyServer

CacheServer = ValkeyServer | RedisTlsClusterServer
POLL_S = 0.05
EVICTION_POLICY = "volatile-lru"  # what ElastiCache Serverless evicts at its cap
CONNECTION_ALLOWANCE = 64 * 1024  # above the 34 KB measured per connection (module docstring)
CONNECTIONS_PER_WORKER = 8  # a worker's client pool: its in-flight transfers and the claim


def _node(cache: CacheServer) -> redis.Redis:
    # a timeout: a server stopped or paused under it (Ctrl-C, chaos) must not hold the run
    return redis.Redis(host=HOST, port=cache.port, ssl=cache.tls, ssl_ca_certs=cache.ca_cert,
                       socket_timeout=2.0, socket_connect_timeout=2.0)


class CacheCap:
    """Hold ``cache`` to ``data_bytes`` of data (module docstring) while the context is open."""

    def __init__(self, cache: CacheServer, data_bytes: int, *, in_flight_bytes: int = 0,
                 expected_connections: int = 0) -> None:
        self.cache = cache
        self.data_bytes = int(data_bytes)
        self.in_flight_bytes = int(in_flight_bytes)
        self.expected_connections = int(expected_connections)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="cache-cap", daemon=True)
        self._client = _node(cache)

    def __enter__(self) -> Self:
        self._adjust()
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._client.close()

    def _adjust(self) -> None:
        info = self._client.info()
        if info.get("maxmemory_policy") != EVICTION_POLICY:  # a restarted server forgot it
            self._client.config_set("maxmemory-policy", EVICTION_POLICY)
        overhead = int(info["used_memory"]) - int(info["used_memory_dataset"])
        clients = max(int(info["connected_clients"]), self.expected_connections)
        connections = clients * CONNECTION_ALLOWANCE
        self._client.config_set(
            "maxmemory", overhead + connections + self.in_flight_bytes + self.data_bytes)

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self._adjust()
            except redis.RedisError:  # the server restarts (chaos) or stops: try again
                continue


def evicted_keys(cache: CacheServer) -> int:
    """Keys the cache evicted at its cap since it started (INFO stats)."""
    with closing(_node(cache)) as client:
        return int(client.info("stats")["evicted_keys"])
