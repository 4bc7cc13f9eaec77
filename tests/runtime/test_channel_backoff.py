"""The channel's polling backoff (fasdl.exchange.channel.base.Backoff): capped, jittered,
unbounded."""

from __future__ import annotations

import itertools
import random

from fasdl.exchange.channel.base import Backoff


def test_backoff_grows_to_its_cap_and_keeps_polling_forever() -> None:
    """A worker may wait minutes for a peer Lambda retries: the 1025th delay once raised
    OverflowError (2.0**1024) and failed the run instead of waiting until its deadline."""
    backoff = Backoff(first_s=0.005, cap_s=0.25, factor=2.0)
    delays = list(itertools.islice(backoff.delays(random.Random(7)), 5000))
    assert len(delays) == 5000
    assert all(0.0 <= delay <= 0.25 for delay in delays)
    assert max(delays[:1]) <= 0.005  # the first window is first_s
    assert max(delays[1000:]) > 0.2  # late windows are the cap, not smaller
