"""local.servers.slot_meter: the relay's per-hash-slot ceiling. Requests and replies parsed
from the bytes as they pass (any split) and paired in order, values paid to their key's slot
both ways, and a real cluster client through the relay held per slot."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from redis.crc import key_slot

from fasdl.exchange.channel.valkey import ValkeyChannel
from local.servers.ecpu_proxy import EcpuBucket, EcpuProxy
from local.servers.managed import HOST, ValkeyServer
from local.servers.slot_meter import KB, NO_CEILING, ReplyParser, RequestParser, SlotMeter

Request = tuple[bytes, bytes]


def _resp(*arguments: bytes) -> bytes:
    return b"*%d\r\n" % len(arguments) + b"".join(
        b"$%d\r\n%s\r\n" % (len(argument), argument) for argument in arguments)


STREAM = (_resp(b"SET", b"ex/merged/0", b"v" * 3000, b"EX", b"60", b"NX")
          + _resp(b"GET", b"ex/merged/0") + _resp(b"PING")
          + _resp(b"DEL", b"a", b"b"))
EXPECTED: list[Request] = [(b"SET", b"ex/merged/0"), (b"GET", b"ex/merged/0"),
                           (b"PING", b""), (b"DEL", b"a")]
# the server's answers to STREAM, then a miss, a nested array (CLUSTER SLOTS' kind) and a
# RESP3 map (HELLO's kind: the cluster client speaks RESP3)
REPLIES = (b"+OK\r\n" + b"$3000\r\n" + b"v" * 3000 + b"\r\n" + b"+PONG\r\n" + b":2\r\n"
           + b"$-1\r\n" + b"*2\r\n*2\r\n:0\r\n$2\r\nab\r\n*0\r\n"
           + b"%2\r\n+proto\r\n:3\r\n+mode\r\n_\r\n")


@pytest.mark.parametrize("piece", [1, 2, 7, 64, len(STREAM)])
def test_requests_are_read_from_the_stream_however_it_is_split(piece: int) -> None:
    seen: list[Request] = []
    values: list[int] = []
    parser = RequestParser(lambda *request: seen.append(request),
                           lambda key, nbytes: values.append(nbytes))
    for start in range(0, len(STREAM), piece):
        parser.feed(STREAM[start:start + piece])
    assert seen == EXPECTED and not parser.broken
    assert sum(values) == 3002  # the SET's value and its CRLF, as it passed


@pytest.mark.parametrize("piece", [1, 3, 64, len(REPLIES)])
def test_replies_are_delimited_however_they_are_split(piece: int) -> None:
    bodies: list[int] = []
    replies: list[int] = []
    parser = ReplyParser(bodies.append, lambda: replies.append(sum(bodies)))
    for start in range(0, len(REPLIES), piece):
        parser.feed(REPLIES[start:start + piece])
    # OK, the GET's 3000 bytes + CRLF, PONG, :2, the miss, the nested array's 2 + CRLF, the map
    assert replies == [0, 3002, 3002, 3002, 3002, 3006, 3006] and not parser.broken


def test_an_inline_command_leaves_the_connection_unmetered() -> None:
    seen: list[Request] = []
    parser = RequestParser(lambda *request: seen.append(request), lambda key, nbytes: None)
    parser.feed(b"PING\r\n" + _resp(b"GET", b"k"))
    assert parser.broken and seen == []


class Counting:
    def __init__(self, rate: float | None) -> None:
        self.rate, self.paid, self.throttled_s = rate, 0.0, 0.0

    def pay(self, ecpus: float) -> None:
        self.paid += ecpus


def test_a_value_pays_its_keys_slot_both_ways_and_a_miss_pays_nothing() -> None:
    buckets: dict[float | None, list[Counting]] = {}
    writes: list[int] = []

    def make(rate: float | None) -> Counting:
        buckets.setdefault(rate, []).append(Counting(rate))
        return buckets[rate][-1]

    meter = SlotMeter(30_000.0, make, on_write=lambda: writes.append(1))
    connection = meter.connection()
    connection.feed_request(STREAM + _resp(b"GET", b"never-set") + _resp(b"CLUSTER", b"SLOTS"))
    connection.feed_reply(REPLIES)
    slot = key_slot(b"ex/merged/0")
    assert meter.by_slot[slot] == pytest.approx(2 * 3002 / 1024)  # the SET up, the GET down
    assert key_slot(b"never-set") not in meter.by_slot  # its reply was a miss
    assert len(meter.by_slot) == 1  # PONG, :2 and the array paid no slot
    assert writes == [1] and not connection.broken
    assert {bucket.rate for bucket in buckets[30_000.0]} == {30_000.0}



@pytest.mark.parametrize("ceiling", [None, float(NO_CEILING)])
def test_without_a_ceiling_a_connection_stops_parsing_after_the_first_set(
        ceiling: float | None) -> None:
    """Parsing costs the relay's CPU: once a SET has started a fresh cache's ramp and no slot
    ceiling binds, nothing is parsed (nor paid) any more, on old and new connections."""
    meter = SlotMeter(ceiling, Counting)
    first, other = meter.connection(), meter.connection()
    other.feed_request(_resp(b"GET", b"k"))
    first.feed_request(STREAM)
    assert first.blind and other.blind and not first.broken
    paid = dict(meter.by_slot)
    first.feed_request(_resp(b"SET", b"another", b"v" * 5000))
    meter.connection().feed_request(_resp(b"SET", b"third", b"v" * 5000))
    assert meter.by_slot == paid
    meter.set_rate(30_000.0)  # a ceiling: new connections parse again
    fresh = meter.connection()
    fresh.feed_request(_resp(b"SET", b"another", b"v" * 5000))
    assert not fresh.blind and key_slot(b"another") in meter.by_slot

@pytest.fixture
def valkey() -> Iterator[ValkeyServer]:
    with ValkeyServer(cluster=True) as server:
        yield server


def test_one_key_read_many_times_is_held_to_the_slots_rate(valkey: ValkeyServer) -> None:
    """A 256 KB value read 12 times: ~3,300 ECPUs on one slot. At 1,000 ECPU/s per slot
    (and no cache-wide maximum) the slot's bucket holds the reads back; another key's slot
    is not touched."""
    value = os.urandom(256 * KB)
    with EcpuProxy(valkey) as proxy:
        proxy.slots.set_rate(1_000.0)
        channel = ValkeyChannel(HOST, proxy.port, prefix="slot/", cluster=True)
        try:
            channel.put("merged", value)
            for _ in range(12):
                assert channel.get("merged", time.monotonic() + 60) == value
        finally:
            channel.close()
        busiest = max(proxy.slots.by_slot.values())
        assert busiest == pytest.approx(13 * 256, rel=1e-3)  # the SET, twelve GETs of 256 KB
        assert proxy.slots.held_back_s > 1.5  # ~3.3 s of the slot's time, no burst
        assert proxy.bucket.throttled_s == 0.0  # the cache-wide maximum was never set
        assert "per hash slot (maximum 1,000/s)" in proxy.describe()
        assert isinstance(proxy.bucket, EcpuBucket)
