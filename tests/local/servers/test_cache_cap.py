"""local.servers.cache_cap on a real Valkey (one-node cluster, as ElastiCache Serverless): data past
the cap is evicted; the buffers of many connections are not data and evict nothing."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from local.servers.cache_cap import POLL_S, CacheCap, evicted_keys
from local.servers.managed import ValkeyServer

FRAME = 50_000


@pytest.fixture
def valkey() -> Iterator[ValkeyServer]:
    with ValkeyServer(cluster=True) as server:
        yield server


def _write(server: ValkeyServer, keys: int, connections: int) -> None:
    clients = [server.client() for _ in range(connections)]
    try:
        for key in range(keys):
            client = clients[key % connections]
            client.set(f"frame{key}", os.urandom(FRAME), ex=600)
            client.get(f"frame{key}")  # a reply buffer of the frame's size, as a reader holds
            time.sleep(POLL_S)  # the watcher sees each connection's buffers grow
    finally:
        for client in clients:
            client.close()


def test_data_past_the_cap_is_evicted(valkey: ValkeyServer) -> None:
    with CacheCap(valkey, 10 * FRAME, in_flight_bytes=FRAME):
        _write(valkey, 20, 2)
    assert evicted_keys(valkey) > 0


def test_connection_buffers_evict_nothing_under_the_cap(valkey: ValkeyServer) -> None:
    """Twenty connections' buffers (about 1 MB here, more than the data) are not data."""
    with CacheCap(valkey, 25 * FRAME, in_flight_bytes=FRAME):
        _write(valkey, 20, 20)
        client = valkey.client()
        try:
            assert client.dbsize() == 20
        finally:
            client.close()
    assert evicted_keys(valkey) == 0


def test_a_restarted_server_gets_the_eviction_policy_back(valkey: ValkeyServer) -> None:
    with CacheCap(valkey, 10 * FRAME):
        valkey.restart()
        time.sleep(10 * POLL_S)
        client = valkey.client()
        try:
            assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "volatile-lru"
        finally:
            client.close()
