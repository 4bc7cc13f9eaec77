"""Channels against real servers: Valkey (plain, cluster), Redis TLS cluster, SeaweedFS S3."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from redis.cluster import RedisCluster

from fasdl.exchange.channel.base import Channel, ChannelError, ChannelTimeout
from fasdl.exchange.channel.factory import (
    ChannelConfig,
    ChannelConfigError,
    build_channel,
)
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.exchange.channel.valkey import ValkeyChannel
from fasdl.exchange.wire import FrameError, decode_shard, encode_shard
from local.servers import managed
from local.servers.managed import RedisTlsClusterServer, SeaweedS3Server, ValkeyServer
from tests.integration.conftest import VALKEY_BACKENDS, Backend

RUN = "run-int"


def soon(seconds: float) -> float:
    return time.monotonic() + seconds


def test_put_get_delete_round_trip(channel: Channel) -> None:
    assert channel.try_get("it/00000000/a") is None
    channel.put("it/00000000/a", b"alpha")
    channel.put("it/00000000/b", b"")
    assert channel.try_get("it/00000000/a") == b"alpha"
    assert channel.get("it/00000000/b", soon(5)) == b""
    channel.put("it/00000000/a", b"overwritten")
    assert channel.get("it/00000000/a", soon(5)) == b"overwritten"
    channel.delete(["it/00000000/a", "it/00000000/b", "it/00000000/never-written"])
    assert channel.try_get("it/00000000/a") is None
    assert channel.try_get("it/00000000/b") is None
    channel.delete([])


def test_put_if_absent_creates_once_even_when_racing(backend: Backend, channel: Channel,
                                                    prefix: str) -> None:
    """The fencing primitive (fasdl.run.fencing): S3 If-None-Match, Valkey SET NX."""
    assert channel.put_if_absent("claim/0001", b"first")
    assert not channel.put_if_absent("claim/0001", b"second")
    assert channel.try_get("claim/0001") == b"first"
    assert channel.claim("claim/0001", b"first")  # a retried create of our own
    assert not channel.claim("claim/0001", b"second")
    rivals = [backend.channel(prefix) for _ in range(6)]
    won: list[bool] = []
    threads = [threading.Thread(target=lambda c=c, i=i: won.append(  # type: ignore[misc]
        c.put_if_absent("claim/0002", str(i).encode()))) for i, c in enumerate(rivals)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for rival in rivals:
        rival.close()
    assert won.count(True) == 1


def test_get_waits_for_a_key_put_later(backend: Backend, channel: Channel, prefix: str) -> None:
    writer = backend.channel(prefix)
    timer = threading.Timer(0.4, writer.put, args=("late", b"here at last"))
    started = time.monotonic()
    timer.start()
    try:
        assert channel.get("late", soon(60)) == b"here at last"
    finally:
        timer.join()
        writer.close()
    # never before the put (load only delays it); the upper bound only tells "returned when
    # the key came" from "waited out its 60 s deadline", which no load reaches
    assert 0.35 <= time.monotonic() - started < 30


def test_get_times_out(channel: Channel) -> None:
    started = time.monotonic()
    with pytest.raises(ChannelTimeout, match="'missing' did not appear"):
        channel.get("missing", soon(0.5))
    # never before the deadline; the upper bound (10x it) only catches a get that polls on
    # past it: its sleeps are cut at the deadline, so only one last try_get runs after it
    assert 0.5 <= time.monotonic() - started < 5


def test_delete_prefix_removes_only_that_prefix(
    backend: Backend, channel: Channel, prefix: str
) -> None:
    doomed = ["it/00000001/shard/000", "it/00000001/shard/001", "we[ir]d*?/k"]
    kept = ["it/000000010/shard/000", "it/00000002/shard/000", "weird!/k", "we[ir]d/k"]
    for key in doomed + kept:
        channel.put(key, key.encode())
    neighbour = backend.channel(prefix.rstrip("/") + "-neighbour/")
    try:
        neighbour.put("it/00000001/shard/000", b"other namespace")
        assert channel.delete_prefix("it/00000001/") == 2
        assert channel.delete_prefix("we[ir]d*?/") == 1
        assert [channel.try_get(key) for key in doomed] == [None] * len(doomed)
        assert [channel.try_get(key) for key in kept] == [key.encode() for key in kept]
        assert neighbour.try_get("it/00000001/shard/000") == b"other namespace"
    finally:
        neighbour.delete_prefix("")
        neighbour.close()


@pytest.mark.parametrize("backend", VALKEY_BACKENDS, indirect=True)
def test_valkey_keys_carry_a_ttl(backend: Backend, channel: Channel) -> None:
    assert isinstance(channel, ValkeyChannel)
    channel.put("k", b"v")
    assert 0 < channel.ttl("k") <= backend.ttl_s
    assert channel.ttl("missing") == -2


def test_20_mb_shard_round_trips(channel: Channel) -> None:
    values = np.random.default_rng(1).standard_normal(5 * 2**20).astype(np.float32)
    channel.put("big", encode_shard(values, run=RUN, iteration=3, worker=1, shard=0))
    data = channel.get("big", soon(30))
    decoded = decode_shard(data, run=RUN, iteration=3, shard=0, worker=1,
                           expected_count=values.size, dtype=np.float32)
    np.testing.assert_array_equal(decoded, values)


def test_frames_damaged_in_the_store_are_rejected(
    backend: Backend, channel: Channel, prefix: str
) -> None:
    frame = bytearray(encode_shard(np.ones(1000, np.float64), run=RUN, iteration=5, worker=0,
                                   shard=1))
    frame[-3] ^= 0xFF
    backend.raw_put(prefix + "corrupt", bytes(frame))
    with pytest.raises(FrameError, match="corrupted frame"):
        decode_shard(channel.get("corrupt", soon(5)), run=RUN, iteration=5, shard=1)
    backend.raw_put(prefix + "truncated", bytes(frame[:500]))
    with pytest.raises(FrameError, match="truncated frame"):
        decode_shard(channel.get("truncated", soon(5)), run=RUN, iteration=5, shard=1)
    stale = encode_shard(np.ones(1000, np.float64), run=RUN, iteration=4, worker=0, shard=1)
    backend.raw_put(prefix + "stale", stale)
    with pytest.raises(FrameError, match="stale frame: iteration 4, expected 5"):
        decode_shard(channel.get("stale", soon(5)), run=RUN, iteration=5, shard=1)


@pytest.mark.parametrize("backend", VALKEY_BACKENDS, indirect=True)
def test_valkey_replies_are_parsed_by_hiredis_and_values_sent_unpacked(
        backend: Backend, channel: Channel) -> None:
    assert isinstance(channel, ValkeyChannel)
    channel.put("parsed", b"x" * 100_000)
    assert channel.get("parsed", soon(5)) == b"x" * 100_000
    client = channel._client
    pools = ([node.redis_connection.connection_pool for node in client.get_nodes()]
             if isinstance(client, RedisCluster) else [client.connection_pool])
    for pool in pools:
        connection = pool.get_connection()
        try:
            assert type(connection._parser).__name__ == "_HiredisParser"
            assert type(connection._command_packer).__name__ == "PythonRespSerializer"
        finally:
            pool.release(connection)


@pytest.fixture
def own_valkey() -> Iterator[ValkeyServer]:
    with ValkeyServer() as server:
        yield server


def test_channel_survives_a_valkey_restart(own_valkey: ValkeyServer) -> None:
    channel = ValkeyChannel(own_valkey.host, own_valkey.port, prefix="restart/")
    try:
        channel.put("before", b"1")
        assert channel.get("before", soon(5)) == b"1"
        own_valkey.restart()  # same port; no persistence, so the old key is gone
        assert channel.try_get("before") is None
        channel.put("after", b"2")
        assert channel.get("after", soon(5)) == b"2"
    finally:
        channel.close()


def test_tls_cluster_channel_survives_a_restart() -> None:
    # ElastiCache Serverless is TLS + cluster mode: the slot map must be relearned too.
    with RedisTlsClusterServer() as server:
        channel = build_channel(server.channel_config("restart/"))
        try:
            channel.put("before", b"1")
            server.restart()
            channel.put("after", b"2")
            assert channel.get("after", soon(5)) == b"2"
        finally:
            channel.close()


def test_restart_while_a_put_is_retrying(own_valkey: ValkeyServer) -> None:
    channel = ValkeyChannel(own_valkey.host, own_valkey.port, retry_window_s=15)
    try:
        channel.put("warm", b"up")
        own_valkey.halt()  # down for a moment, as during a failover
        restarter = threading.Timer(0.5, own_valkey.resume)
        restarter.start()
        channel.put("during", b"outage")
        restarter.join()
        assert channel.get("during", soon(5)) == b"outage"
    finally:
        channel.close()


def test_unreachable_valkey_names_the_endpoint(own_valkey: ValkeyServer) -> None:
    port = own_valkey.port
    own_valkey.halt()
    channel = ValkeyChannel("127.0.0.1", port, retry_window_s=0.3)
    with pytest.raises(ChannelError, match=rf"valkey redis://127\.0\.0\.1:{port}: put 'k' failed"):
        channel.put("k", b"v")
    channel.close()


def test_missing_bucket_names_the_endpoint(seaweed_server: SeaweedS3Server) -> None:
    channel = S3Channel("no-such-bucket", client=seaweed_server.client())
    with pytest.raises(ChannelError, match=r"s3 http://127\.0\.0\.1:\d+/no-such-bucket: put"):
        channel.put("k", b"v")
    channel.close()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "ftp"}, "'kind': must be one of"),
        ({"kind": "s3"}, "'bucket': required"),
        ({"kind": "valkey"}, "'host': required"),
        ({"kind": "valkey", "host": "h", "port": 0}, r"'port': must be in \[1, 65535\]"),
        ({"kind": "valkey", "host": "h", "ttl_s": 0}, "'ttl_s': must be > 0"),
    ],
)
def test_a_bad_channel_config_names_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ChannelConfigError, match=message):
        ChannelConfig(**fields)


def test_a_port_collision_is_retried_with_new_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    picks: list[list[int]] = []
    real_free_ports = managed.free_ports

    def taken_first(count: int, *, grpc_offset: int = 0) -> list[int]:
        ports = real_free_ports(count, grpc_offset=grpc_offset)
        if not picks:
            ports[0] = squatter.getsockname()[1]  # already bound by someone else
        picks.append(ports)
        return ports

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        monkeypatch.setattr(managed, "free_ports", taken_first)
        with ValkeyServer() as server:
            assert len(picks) == 2
            assert server.port == picks[1][0] != squatter.getsockname()[1]
            assert server.client().ping()
