"""The per-segment S3 requests the planner charges, against what the runtime sends."""

from __future__ import annotations

import numpy as np
import pytest

from fasdl.contract.settings import DEFAULT_FENCE_CHECK_S
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.run.fencing import Fence, issue_epoch
from planner.model.inputs.profiles import load_prices
from planner.model.terms.channels import CHANNEL_COSTS
from planner.model.terms.segment_requests import FENCE_GETS_PER_WORKER, segment_request_cost


class CountingChannel(MemoryChannel):
    """A memory channel that counts GETs and PUTs."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = self.puts = 0

    def try_get(self, key: str) -> bytes | None:
        self.gets += 1
        return super().try_get(key)

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        self.gets += 1
        return super().get_versioned(key)

    def put(self, key: str, data: bytes | bytearray) -> None:
        self.puts += 1
        super().put(key, data)

    def put_if_absent(self, key: str, data: bytes | bytearray) -> bool:
        self.puts += 1
        return super().put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes | bytearray, etag: str) -> bool:
        self.puts += 1
        return super().put_if_match(key, data, etag)


@pytest.mark.parametrize(("channel", "claim_puts"), [("s3", 4), ("valkey", 0)])
def test_a_run_pays_loads_checkpoints_fences_and_claims(channel: str, claim_puts: int) -> None:
    prices = load_prices()
    workers, aggregators, segments, time_s = 4, 2, 3.0, 600.0
    cost = segment_request_cost(prices, CHANNEL_COSTS[channel].claim_puts_per_worker,
                                np.array([workers]), np.array([aggregators]),
                                np.array([segments]), np.array([time_s]))
    # per segment: 4·4 load GETs, 2·4 worker fence GETs, the trigger's fence GET; plus the
    # fence checks 4·600/10; PUTs: 4 + 2 + 1 checkpoint, the trigger's fence, the claims
    gets = (16 + 8 + 1) * segments + workers * time_s / DEFAULT_FENCE_CHECK_S
    puts = (workers + aggregators + 1 + 1 + claim_puts) * segments
    assert float(cost[0]) == pytest.approx(gets * prices.s3_get + puts * prices.s3_put)


def test_the_fence_reads_a_worker_makes_are_what_the_planner_charges() -> None:
    store = CountingChannel()
    epoch = issue_epoch(store, "run", supersedes=None, call="start")
    assert (store.gets, store.puts) == (1, 1)  # the trigger's read-then-write, per segment
    # a later one: a read, then a write on its ETag
    epoch = issue_epoch(store, "run", supersedes=epoch, call="next")
    assert (store.gets, store.puts, epoch) == (2, 2, 2)
    clock = [0.0]
    fence = Fence(store, "run", epoch, check_every_s=DEFAULT_FENCE_CHECK_S,
                  clock=lambda: clock[0])
    store.gets = 0
    training_s = 600.0
    fence.check(force=True)  # the segment's start
    while clock[0] < training_s:  # an iteration every 0.7 s asks
        fence.check()
        clock[0] += 0.7
    fence.check(force=True)  # before the checkpoint
    charged = FENCE_GETS_PER_WORKER + training_s / DEFAULT_FENCE_CHECK_S
    # checks fall on iteration boundaries, so a little under one per 10 s: charged is a bound
    assert 0.9 * charged <= store.gets <= charged
