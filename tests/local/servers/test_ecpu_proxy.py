"""local.servers.ecpu_proxy: the local cache metered in ECPUs and held to its ECPU/s maximum, with
the exchange's own Valkey channel talking to a real Valkey cluster through it."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from fasdl.contract.plan import Plan
from fasdl.exchange.channel.valkey import ValkeyChannel
from local.run.run_servers import planned_ramp
from local.servers import ecpu_proxy
from local.servers.ecpu_proxy import BURST_S, EcpuBucket, EcpuProxy, Ramp, ecpus_of
from local.servers.managed import HOST, ValkeyServer
from local.servers.slot_meter import KB
from tests.local.fake_clock import FakeClock

FRAME = 1024 * KB


def test_ecpus_are_kilobytes_and_a_request_costs_at_least_one() -> None:
    assert ecpus_of(10, request=True) == 1
    assert ecpus_of(10, request=False) == 1
    assert ecpus_of(0, request=False) == 0
    assert ecpus_of(KB + 1, request=True) == 2
    assert ecpus_of(64 * KB, request=False) == 64


def test_the_bucket_holds_a_burst_then_the_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    # a fake clock: on the real one, time between the two payments refills the bucket, and a
    # loaded machine made that more than the tolerance
    clock = FakeClock()
    monkeypatch.setattr(ecpu_proxy, "time", SimpleNamespace(monotonic=clock, sleep=clock.sleep))
    bucket = EcpuBucket(10_000)
    began = clock.now
    bucket.pay(int(10_000 * BURST_S))  # the burst: no wait
    assert bucket.throttled_s == 0.0
    bucket.pay(2_000)  # 0.2 s of debt
    assert clock.now - began == pytest.approx(0.2)  # slept exactly the debt
    assert bucket.throttled_s == pytest.approx(0.2)
    assert bucket.used == 12_000
    unmetered = EcpuBucket(None)
    unmetered.pay(10**9)
    assert unmetered.used == 10**9 and unmetered.throttled_s == 0.0


def test_a_fresh_cache_ramps_from_its_first_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """30,000 ECPU/s from the first request, doubling every 150 s, up to the maximum."""
    clock = FakeClock()
    monkeypatch.setattr(ecpu_proxy, "time", SimpleNamespace(monotonic=clock, sleep=clock.sleep))
    bucket = EcpuBucket(None)
    bucket.set_rate(100_000, Ramp(30_000.0, 150.0))
    clock.sleep(500.0)  # idle before the run: the ramp starts with the first request
    bucket.pay(30_000)  # the fresh rate's burst
    began = clock.now
    bucket.pay(30_000)  # a second at 30,000/s
    assert clock.now - began == pytest.approx(1.0)
    clock.sleep(150.0)  # the first doubling: 60,000/s, the bucket refilled to a second of it
    began = clock.now
    bucket.pay(60_000 + 30_000)
    assert clock.now - began == pytest.approx(0.5)
    clock.sleep(300.0)  # 240,000/s by the ramp, held to the maximum of 100,000
    began = clock.now
    bucket.pay(100_000 + 50_000)
    assert clock.now - began == pytest.approx(0.5)
    assert Ramp(30_000.0, 150.0).rate(449.0) == 60_000.0 * 2
    # held back per doubling interval: 1 s in the first, 0.5 s in the second; the third
    # (120,000/s by the ramp) reaches the maximum and takes the rest: the fourth's 0.5 s
    assert bucket.held_back_by_interval == pytest.approx([1.0, 0.5, 0.5])


def test_the_relay_ramps_by_the_numbers_the_plan_charged() -> None:
    """local run's relay: the plan's fresh rate and doubling interval, none for a warm plan."""
    plan = Plan.from_json(Path("tests/infra/plans/valkey_arm64.json").read_text())
    assert plan.prediction is not None and planned_ramp(plan) is None
    ramped = dataclasses.replace(plan, prediction=dataclasses.replace(
        plan.prediction, cache_ramp_s=40.0, cache_fresh_ecpu_per_s=2_000.0,
        cache_ramp_doubling_s=3.0))
    assert planned_ramp(ramped) == Ramp(2_000.0, 3.0)


@pytest.fixture
def valkey() -> Iterator[ValkeyServer]:
    with ValkeyServer(cluster=True) as server:
        yield server


def _round_trip(port: int) -> float:
    """Seconds to connect (the slot map comes through the relay too), put and get a frame."""
    data = os.urandom(FRAME)
    began = time.monotonic()
    channel = ValkeyChannel(HOST, port, prefix="ecpu/", cluster=True)
    try:
        channel.put("frame", data)
        assert channel.get("frame", time.monotonic() + 60) == data
        return time.monotonic() - began
    finally:
        channel.close()


def test_a_cluster_client_is_metered_and_held_to_the_maximum(valkey: ValkeyServer) -> None:
    """Put and get 1 MB: about 2,048 ECPUs. Unlimited it is only metered; at 1,000 ECPU/s
    (the smallest maximum ElastiCache accepts) it takes at least the second past the burst."""
    with EcpuProxy(valkey) as proxy:
        _round_trip(proxy.port)
        assert proxy.bucket.used >= 2 * FRAME // KB  # the redirections came back through it
        assert proxy.bucket.throttled_s == 0.0
    with EcpuProxy(valkey, 1_000) as proxy:
        elapsed = _round_trip(proxy.port)
        debt_s = (proxy.bucket.used - 1_000 * BURST_S) / 1_000
        assert debt_s > 0.9
        assert elapsed >= debt_s - 0.05  # never faster than the maximum allows (load: slower)
        # held back, though less than the whole debt: the rest was refilled while it worked.
        # How much was refilled is the relay's own speed, which load changes: not asserted.
        assert 0 < proxy.bucket.throttled_s < debt_s
        assert "held back" in proxy.describe()


def test_a_slot_streams_at_its_rate_though_its_payer_wakes_late(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No burst, yet a payer that oversleeps each chunk's debt loses nothing: 75 chunks of 64
    ECPUs at 82,113 ECPU/s take their 58 ms (without the credit, 0.3 ms late per chunk: 81
    ms); after an idle gap the bucket grants nothing at once."""
    clock = FakeClock()
    late = 0.0003  # a scheduler's wake-up, on top of every sleep

    def oversleep(seconds: float) -> None:
        clock.sleep(seconds + late)

    monkeypatch.setattr(ecpu_proxy, "time", SimpleNamespace(monotonic=clock, sleep=oversleep))
    bucket = EcpuBucket(82_113.0, burst_s=0.0)
    start = clock.now
    for _ in range(75):
        bucket.pay(64)
    assert clock.now - start == pytest.approx(75 * 64 / 82_113.0, abs=0.001)
    clock.now += 1.0  # idle
    start = clock.now
    bucket.pay(64)
    assert clock.now - start == pytest.approx(64 / 82_113.0 + late)


@pytest.mark.parametrize("forward_s", [0.0005, 0.001])
def test_a_slot_overlaps_its_rate_with_the_streams_forwarding(
        monkeypatch: pytest.MonkeyPatch, forward_s: float) -> None:
    """A stream that forwards each chunk after paying it takes the larger of its slot time and
    its forwarding, not their sum (0.5 ms per 64 KB chunk: the slot's 58 ms; 1 ms: 75 ms)."""
    clock = FakeClock()
    monkeypatch.setattr(ecpu_proxy, "time", SimpleNamespace(monotonic=clock, sleep=clock.sleep))
    bucket = EcpuBucket(82_113.0, burst_s=0.0)
    start = clock.now
    for _ in range(75):
        bucket.pay(64)
        clock.sleep(forward_s)
    slot_s = 75 * 64 / 82_113.0
    assert clock.now - start == pytest.approx(max(slot_s, 75 * forward_s) + forward_s,
                                              abs=0.001)
