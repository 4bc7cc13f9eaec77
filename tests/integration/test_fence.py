"""Exactly-once holes, reproduced against the real SeaweedFS S3 server (and every exchange
backend for claims): a fence that cannot go back, a claim no second invocation gets, a
manifest that commits only its own epoch's part records."""

from __future__ import annotations

import json
import threading

import pytest

from fasdl.contract.errors import FenceConflict, FenceWentBack, WorkerDuplicate, WorkerFenced
from fasdl.contract.keys import checkpoint_part_key, fence_key
from fasdl.exchange.channel.base import Channel
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.run.checkpoint import CheckpointError, commit_manifest, put_objects
from fasdl.run.fencing import Fence, claim_worker, issue_epoch, read_epoch
from tests.integration.conftest import Backend

RUN = "run-fence"


class StalledWrite(S3Channel):
    """A trigger action whose conditional write stalls after its read until released: the
    sequence of a Task retried on a Lambda 5xx while the first invocation still runs."""

    def __init__(self, base: S3Channel) -> None:
        super().__init__(base.bucket, base.prefix, client=base._client)
        self.read = threading.Event()
        self.release = threading.Event()

    def put_if_match(self, key: str, data: bytes | bytearray, etag: str) -> bool:
        self.read.set()
        self.release.wait(30)
        return super().put_if_match(key, data, etag)


def test_a_stalled_trigger_write_cannot_set_the_fence_back(results_store: S3Channel) -> None:
    """Without the conditional write, A's late PUT set the fence from 3 back to 2, the epoch-3
    workers were fenced and `retry` issued epoch 3 a second time. A (`retry` of epoch 1)
    stalls after its read; B, its retry by Step Functions, issues 2 and its segment runs;
    `next` issues 3; A's write is refused, and A issues nothing."""
    assert issue(results_store, None, "start") == 1
    stalled = StalledWrite(results_store)
    outcome: list[object] = []
    first = threading.Thread(target=lambda: outcome.append(_issue(stalled, 1, "retry")))
    first.start()
    assert stalled.read.wait(30)  # A read epoch 1 and stalls before its write
    assert issue(results_store, 1, "retry") == 2  # B, the retry, issues 2; its segment runs
    assert issue(results_store, 2, "next") == 3  # the next segment
    stalled.release.set()
    first.join(30)
    (error,) = outcome
    assert isinstance(error, FenceConflict) and "run state is at epoch 1" in str(error)
    assert read_epoch(results_store, RUN) == 3
    Fence(results_store, RUN, 3, check_every_s=0).check(force=True)  # the live workers go on
    assert issue(results_store, 3, "retry") == 4  # a retry issues a new epoch, never 3 again


def test_a_late_trigger_call_issues_nothing_and_fences_no_one(results_store: S3Channel) -> None:
    """Issue 41: A (`next` from epoch 1) stalls *before* its read while Step Functions retries
    it; B issues 2 and segment 2 starts. A, arriving late, finds its own call's issue and gets
    epoch 2 back: the fence does not move, segment 2's workers are not fenced, and no retry
    of theirs is spent. Once segment 2 moved on, A is stale and refused."""
    assert issue(results_store, None, "start") == 1
    assert issue(results_store, 1, "next") == 2  # B
    fence = results_store.get_versioned(fence_key(RUN))
    assert issue(results_store, 1, "next") == 2  # A, late: its own issue, no write
    assert results_store.get_versioned(fence_key(RUN)) == fence
    Fence(results_store, RUN, 2, check_every_s=0).check(force=True)
    assert issue(results_store, 2, "next") == 3
    with pytest.raises(FenceConflict, match="run state is at epoch 1 but the fence is at 3"):
        issue(results_store, 1, "next")  # later still: stale
    with pytest.raises(FenceConflict, match="at epoch 2 but the fence is at 3"):
        issue(results_store, 2, "retry")  # another call superseding 2: not this issue's
    assert read_epoch(results_store, RUN) == 3


def issue(store: S3Channel, supersedes: int | None, call: str) -> int:
    return issue_epoch(store, RUN, supersedes=supersedes, call=call)


def _issue(store: S3Channel, supersedes: int | None, call: str) -> object:
    try:
        return issue(store, supersedes, call)
    except FenceConflict as error:
        return error


class LostReply(S3Channel):
    """The first conditional write lands but its reply is lost: botocore's retry of it then
    finds the ETag changed (412), as S3 answers."""

    def __init__(self, base: S3Channel) -> None:
        super().__init__(base.bucket, base.prefix, client=base._client)
        self.lost = False

    def put_if_match(self, key: str, data: bytes | bytearray, etag: str) -> bool:
        landed = super().put_if_match(key, data, etag)
        if landed and not self.lost:
            self.lost = True
            return super().put_if_match(key, data, etag)  # the retry: refused
        return landed


def test_a_write_whose_reply_was_lost_is_still_its_own(results_store: S3Channel) -> None:
    assert issue(results_store, None, "start") == 1
    lossy = LostReply(results_store)
    assert issue(lossy, 1, "next") == 2 and lossy.lost
    assert read_epoch(results_store, RUN) == 2


def test_a_worker_never_trains_on_a_fence_below_its_epoch(results_store: S3Channel) -> None:
    with pytest.raises(FenceWentBack, match="is at epoch None, below this worker's 1"):
        Fence(results_store, RUN, 1, check_every_s=0).check(force=True)
    for epoch in (None, 1, 2):
        issue(results_store, epoch, "next")
    with pytest.raises(WorkerFenced, match="is at epoch 3, this worker's is 2"):
        Fence(results_store, RUN, 2, check_every_s=0).check(force=True)
    results_store.put(fence_key(RUN), json.dumps({"format": 1, "epoch": 2}).encode())  # went back
    with pytest.raises(FenceWentBack, match="is at epoch 2, below this worker's 3"):
        Fence(results_store, RUN, 3, check_every_s=0).check(force=True)


def test_a_second_claim_is_refused_even_with_the_same_request_id(backend: Backend,
                                                                 channel: Channel) -> None:
    claim_worker(channel, RUN, 5, 0, "request-1")
    with pytest.raises(WorkerDuplicate, match="already runs in epoch 5"):
        claim_worker(channel, RUN, 5, 0, "request-1")
    claim_worker(channel, RUN, 5, 1, "request-1")  # another worker's claim is its own


def test_the_manifest_commits_only_its_own_epochs_part_records(results_store: S3Channel) -> None:
    put_objects(results_store, RUN, 8, 3, 0, {"worker/0000/state": b"fresh"})
    stale = json.loads(results_store.try_get(checkpoint_part_key(RUN, 8, 3, 0)) or b"{}")
    put_objects(results_store, RUN, 8, 2, 1, {"worker/0001/state": b"old"})
    results_store.put(checkpoint_part_key(RUN, 8, 3, 1), results_store.try_get(
        checkpoint_part_key(RUN, 8, 2, 1)) or b"")  # a dead attempt's record, copied in
    with pytest.raises(CheckpointError, match="says worker 1, epoch 2"):
        commit_manifest(results_store, RUN, 8, 3, workers=2, timeout_s=5)
    foreign = {**stale, "worker": 1, "objects": {"worker/0001/state": {
        **stale["objects"]["worker/0000/state"],
        "key": stale["objects"]["worker/0000/state"]["key"].replace("epoch/3/", "epoch/2/")}}}
    results_store.put(checkpoint_part_key(RUN, 8, 3, 1), json.dumps(foreign).encode())
    with pytest.raises(CheckpointError, match="not this epoch's object"):
        commit_manifest(results_store, RUN, 8, 3, workers=2, timeout_s=5)
    put_objects(results_store, RUN, 8, 3, 1, {"worker/0001/state": b"fresh too"})
    manifest = commit_manifest(results_store, RUN, 8, 3, workers=2, timeout_s=5)
    assert set(manifest.objects) == {"worker/0000/state", "worker/0001/state"}


def test_worker_zero_cleans_every_epoch_the_live_one_supersedes(backend: Backend,
                                                                channel: Channel) -> None:
    """The finished segment's merged models, a failed attempt's keys and what a zombie of an
    older epoch wrote after its epoch was cleaned (issue 41) are deleted when the next epoch
    starts (Valkey included: the trigger cannot reach it); the live epoch and other runs are
    not touched."""
    from fasdl.contract.keys import exchange_prefix, merged_key, shard_key
    from fasdl.run.fencing import clean_dead_epochs

    for epoch in (1, 2, 3, 4):
        channel.put(merged_key(RUN, epoch, 9, 0), b"merged")
        channel.put(shard_key(RUN, epoch, 9, 1, 0), b"shard")
        claim_worker(channel, RUN, epoch, 0, "request")
    other_run = merged_key("another-run", 2, 9, 0)
    channel.put(other_run, b"theirs")
    channel.put(f"{RUN}/not-an-epoch", b"kept")
    # epoch 4 is live, resuming from epoch 2's checkpoint (epoch 3 was a failed retry); epoch
    # 1's keys are a zombie's, written after epoch 2's worker 0 cleaned epoch 1
    assert clean_dead_epochs(channel, RUN, 4) == 9
    for epoch, kept in ((1, False), (2, False), (3, False), (4, True)):
        assert (channel.try_get(merged_key(RUN, epoch, 9, 0)) is not None) is kept, epoch
        assert (channel.try_get(shard_key(RUN, epoch, 9, 1, 0)) is not None) is kept, epoch
    assert channel.try_get(other_run) == b"theirs"
    assert channel.try_get(f"{RUN}/not-an-epoch") == b"kept"
    assert clean_dead_epochs(channel, RUN, 4) == 0
    assert clean_dead_epochs(channel, "first-run", 1) == 0  # the first segment: nothing before
    assert exchange_prefix(RUN, 4).startswith(f"{RUN}/")
