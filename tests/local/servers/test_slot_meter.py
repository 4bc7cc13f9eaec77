"""local.servers.slot_meter: the relay's per-hash-slot ceiling. Requests parsed from the bytes
as they pass (any split), SET's size remembered for the GETs of that key, and a real cluster
client through the relay held per slot."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from redis.crc import key_slot

from fasdl.exchange.channel.valkey import ValkeyChannel
from local.servers.ecpu_proxy import KB, EcpuBucket, EcpuProxy
from local.servers.managed import HOST, ValkeyServer
from local.servers.slot_meter import RequestParser, SlotMeter, ecpus_of_value

Request = tuple[bytes, bytes, int | None]


def _resp(*arguments: bytes) -> bytes:
    return b"*%d\r\n" % len(arguments) + b"".join(
        b"$%d\r\n%s\r\n" % (len(argument), argument) for argument in arguments)


STREAM = (_resp(b"SET", b"ex/merged/0", b"v" * 3000, b"EX", b"60", b"NX")
          + _resp(b"GET", b"ex/merged/0") + _resp(b"PING")
          + _resp(b"DEL", b"a", b"b"))
EXPECTED: list[Request] = [(b"SET", b"ex/merged/0", 3000), (b"GET", b"ex/merged/0", None),
                           (b"PING", b"", None), (b"DEL", b"a", None)]


@pytest.mark.parametrize("piece", [1, 2, 7, 64, len(STREAM)])
def test_requests_are_read_from_the_stream_however_it_is_split(piece: int) -> None:
    seen: list[Request] = []
    parser = RequestParser(lambda *request: seen.append(request))
    for start in range(0, len(STREAM), piece):
        parser.feed(STREAM[start:start + piece])
    assert seen == EXPECTED and not parser.broken


def test_an_inline_command_leaves_the_connection_unmetered() -> None:
    seen: list[Request] = []
    parser = RequestParser(lambda *request: seen.append(request))
    parser.feed(b"PING\r\n" + _resp(b"GET", b"k"))
    assert parser.broken and seen == []


class Counting:
    def __init__(self, rate: float | None) -> None:
        self.rate, self.paid, self.throttled_s = rate, 0, 0.0

    def pay(self, ecpus: int) -> None:
        self.paid += ecpus


def test_a_get_costs_its_slot_the_size_its_set_brought() -> None:
    buckets: list[Counting] = []

    def make(rate: float | None) -> Counting:
        buckets.append(Counting(rate))
        return buckets[-1]

    meter = SlotMeter(30_000.0, make)
    parser = meter.request_parser()
    parser.feed(STREAM + _resp(b"GET", b"never-set"))
    slot = key_slot(b"ex/merged/0")
    assert meter.by_slot[slot] == 2 * ecpus_of_value(3000) == 6
    assert meter.by_slot[key_slot(b"never-set")] == 1  # not seen: a simple command's 1
    assert meter.by_slot[0] >= 1  # PING's, slot 0
    assert {bucket.rate for bucket in buckets} == {30_000.0}


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
        assert busiest == 13 * 256  # the SET and twelve GETs of 256 KB each
        assert proxy.slots.held_back_s > 0.5  # owed ~2.3 s past the second of burst
        assert proxy.bucket.throttled_s == 0.0  # the cache-wide maximum was never set
        assert "per hash slot (maximum 1,000/s)" in proxy.describe()
        assert isinstance(proxy.bucket, EcpuBucket)
