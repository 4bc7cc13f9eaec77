"""Nothing left behind on the exchange, and a cache sized for what is really there.

A Valkey run of several segments, one of them retried after a crash and one shortened, played
by hand like tests/integration/test_workers.py, on a Valkey of its own held by local.cache_cap
to the planned data cap (fasdl.contract.cache) with volatile-lru, as ElastiCache Serverless
evicts. After every segment the cache holds keys of the live epoch
only (worker 0 of each epoch deletes the epochs it supersedes), nothing was evicted, and
finalize leaves nothing at all; the results bucket keeps the chain's last two checkpoints."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fasdl.contract.cache import CACHE_HEADROOM, exchange_peak_copies
from fasdl.contract.keys import checkpoint_group, checkpoints_prefix, manifest_key
from fasdl.exchange.channel.s3 import S3Channel
from local.cache_cap import CONNECTIONS_PER_WORKER, CacheCap, evicted_keys
from local.servers import SeaweedS3Server, ValkeyServer
from tests.integration.worker_stack import (
    BUCKETS,
    Stack,
    digits_plan,
    digits_store,
    unique_run_id,
)


def _crash(iteration: int) -> dict[str, str]:  # fasdl.run.fault_hooks
    return {"FASDL_TEST_CRASH_AT_ITERATION": str(iteration), "FASDL_TEST_CRASH_WORKER": "2"}


@pytest.fixture
def capped_valkey() -> Iterator[ValkeyServer]:
    with ValkeyServer(cluster=True) as server:
        plan = digits_plan("valkey")
        model_bytes = plan.workload.model_mb * 2**20
        peak_bytes = CACHE_HEADROOM * exchange_peak_copies(plan.deployment.workers) * model_bytes
        workers = plan.deployment.workers
        with CacheCap(server, int(peak_bytes), in_flight_bytes=int(workers * model_bytes),
                      expected_connections=workers * CONNECTIONS_PER_WORKER):
            yield server


def _epochs(valkey: ValkeyServer, run_id: str) -> set[int]:
    client = valkey.client()
    try:
        keys = [key.decode() for key in client.scan_iter(match=f"exchange/{run_id}/*")]
    finally:
        client.close()
    return {int(match[1]) for key in keys
            if (match := re.match(rf"exchange/{re.escape(run_id)}/(\d+)/", key))}


def _segment_ok(stack: Stack, run: dict[str, Any]) -> None:
    outcomes = stack.segment(run)
    assert all(code == 0 for code, _ in outcomes), outcomes


def test_the_cache_holds_only_the_live_epoch_and_never_evicts(
        seaweed_server: SeaweedS3Server, capped_valkey: ValkeyServer, tmp_path: Path) -> None:
    s3_store = digits_store(seaweed_server, tmp_path / "digits")
    plan = digits_plan("valkey")
    stack = Stack(s3_store, plan, tmp_path, {
        "FASDL_CACHE_ENDPOINT": "127.0.0.1", "FASDL_CACHE_PORT": str(capped_valkey.port),
        "FASDL_CACHE_CLUSTER": "1"})
    run_id = unique_run_id("leftovers")
    run = stack.invoke("trigger", {"action": "start", "input": {"run_id": run_id},
                                   "execution": run_id})
    assert any(code != 0 for code, _ in stack.segment(run, _crash(10)))  # a crashed attempt
    run = stack.invoke("trigger", {"action": "retry", "run": run, "error": {
        "Error": "FasDL.WorkerCrashed", "Cause": "exit status 137"}})
    _segment_ok(stack, run)
    assert _epochs(capped_valkey, run_id) == {run["segment"]["epoch"]}  # the dead one gone
    run = stack.invoke("trigger", {"action": "next", "run": run})
    assert any(code != 0 for code, _ in stack.segment(run, _crash(40)))  # as if timed out
    run = stack.invoke("trigger", {"action": "shorten", "run": run, "error": {
        "Error": "FasDL.SegmentTimeout", "Cause": "timed out"}})
    segments = 0
    while not run["done"]:  # the shortened segment's halves: dead and finished epochs go
        _segment_ok(stack, run)
        assert _epochs(capped_valkey, run_id) == {run["segment"]["epoch"]}
        segments += 1
        run = stack.invoke("trigger", {"action": "next", "run": run})
    assert segments == 3  # 14 of the 29 iterations, then 14 (next keeps the length) and 1
    result = stack.invoke("finalize", {"action": "succeeded", "run": run,
                                       "execution": run_id})
    assert _epochs(capped_valkey, run_id) == set()
    assert evicted_keys(capped_valkey) == 0
    # the results bucket: the model, the summary and the chain's last two checkpoints only
    results = S3Channel(BUCKETS[1], "runs/", client=s3_store.client())
    groups = {checkpoint_group(key) for key in results.list_keys(checkpoints_prefix(run_id))}
    last = run["segment"]["resume_epoch"]
    assert len(groups) == 2 and (run["segment"]["start_iteration"], last) in groups
    for iteration, epoch in groups:
        assert results.try_get(manifest_key(run_id, iteration, epoch)) is not None
    assert results.try_get(result["model_key"].removeprefix("runs/")) is not None
