"""Peer waits cover staggered starts until every worker has waited on the others once."""

from __future__ import annotations

from fasdl.contract.settings import Settings
from fasdl.run.time_budget import START_ITERATIONS, peer_wait_s

SETTINGS = Settings.from_env({
    "FASDL_CHANNEL": "s3", "FASDL_DATASETS_BUCKET": "d", "FASDL_RESULTS_BUCKET": "r",
    "FASDL_EXCHANGE_BUCKET": "e", "FASDL_PEER_WAIT_START_S": "60",
    "FASDL_PEER_WAIT_MIN_S": "3", "FASDL_PEER_WAIT_FACTOR": "5"})


def test_a_warm_worker_waits_for_cold_peers_through_its_second_iteration() -> None:
    """Under hap the first merged shards are loaded in the second iteration: a warm worker
    whose first iteration took 0.05 s (it uploaded and went on) must still wait for an
    aggregator that is importing torch, not give up after the 3 s floor (seen in the chaos
    bench once sandboxes were reused)."""
    assert START_ITERATIONS == 2
    assert peer_wait_s(SETTINGS, [0.05], 500.0) == 60.0
    assert peer_wait_s(SETTINGS, [0.05, 9.0], 500.0) == 45.0  # it waited: 5 x that
    assert peer_wait_s(SETTINGS, [0.05, 0.1], 500.0) == 3.0  # both fast: the floor
