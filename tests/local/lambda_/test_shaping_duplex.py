"""Duplex in the emulator: the link both directions share below full duplex
(local/lambda_/shaping.py) and the profiler's measurement of it through shaped real channels
(fasdl/profiling/transfers.py)."""

from __future__ import annotations

import pytest

from fasdl.exchange.channel.base import Channel
from local.lambda_.shaping import MB, BandwidthShaper, ShapedChannel, SharedLink
from planner.model.inputs.profiles import PlatformProfile, load_platform
from planner.model.terms.pipelined import both_ways
from tests.local.fake_clock import FakeClock
from tests.planner.problems import with_duplex


def test_shared_link_fills_gaps_before_later_reservations() -> None:
    link = SharedLink()
    assert link.reserve(10.0, 1.0) == 11.0
    assert link.reserve(13.0, 1.0) == 14.0  # reserved ahead, leaving [11, 13] free
    assert link.reserve(10.5, 2.5) == 14.5  # 2 s of the gap, then 0.5 s after [13, 14]
    assert link.reserve(100.0, 1.0) == 101.0


@pytest.mark.parametrize("duplex", [1.0, 0.5, 0.0])
def test_upload_and_download_at_once_share_the_link_by_the_profiles_duplex(
        duplex: float) -> None:
    clock = FakeClock()
    platform = with_duplex(load_platform("s3"), duplex)
    shaper = BandwidthShaper(platform, 512, clock=clock, sleep=clock.sleep)
    up, down = shaper.target_s("up", 8 * MB), shaper.target_s("down", 8 * MB)
    began = clock.now
    both = max(shaper.reserve("up", began, 8 * MB), shaper.reserve("down", began, 8 * MB))
    assert both - began == pytest.approx(float(both_ways(up, down, duplex)))
    later = both + 10.0  # one after the other: nothing shared
    assert shaper.reserve("down", later, 8 * MB) == pytest.approx(later + down)
    # a long download queue does not delay an upload that starts while it runs (full duplex)
    full = BandwidthShaper(load_platform("s3"), 512, clock=clock, sleep=clock.sleep)
    start = clock.now + 100.0
    for _ in range(10):
        full.reserve("down", start, 8 * MB)
    assert full.reserve("up", start + 4 * down, 8 * MB) == pytest.approx(start + 4 * down + up)


@pytest.mark.serial
@pytest.mark.parametrize("duplex", [1.0, 0.5])
def test_the_profiler_measures_the_shaped_duplex(real: tuple[Channel, PlatformProfile],
                                                 duplex: float) -> None:
    """fasdl.profiling.transfers.measure_duplex through a shaped real channel finds the profile's d:
    the profiler would find a real function's the same way.

    Serial (run alone after the parallel pass): d is a ratio of shaped wall-clock transfer
    times, and a transfer that a loaded CPU slows past its shaped target keeps its slower
    time (the shaper only sleeps the rest), which skews the ratio; the other tests here
    run on a fake clock."""
    from fasdl.profiling.transfers import measure_duplex
    from planner.fit.samples import DuplexRecord

    inner, platform = real
    # at 128 MB the slots are 2-2.5x those at 512 MB, so the real transfers inside them, and
    # a loaded machine's late wake-ups, stay a small part of what is measured
    channel = ShapedChannel(inner, with_duplex(platform, duplex), 128)
    channel.put("warm", b"w")
    records = measure_duplex(channel, platform.channel, 128, 4.0, 5, "duplex/")
    assert len(records) == 5 and all(r["kind"] == "duplex" for r in records)
    found = sorted(DuplexRecord(r["memory_mb"], r["channel"], r["size_mb"], r["seconds"],
                                r["up_s"], r["down_s"]).duplex() for r in records)
    assert found[2] == pytest.approx(duplex, abs=0.25), records
    assert inner.try_get("duplex/duplex-source") is None  # its objects are deleted
