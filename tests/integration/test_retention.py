"""The results bucket keeps the newest FASDL_KEEP_CHECKPOINTS checkpoints of a run's chain and
nothing of a dead attempt (fasdl.run.retention), on the real SeaweedFS S3 server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fasdl.contract.keys import checkpoint_group, checkpoints_prefix
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.run.checkpoint import commit_manifest, put_objects
from fasdl.run.retention import RESUMED_FROM, prune_checkpoints, resumed_from
from local.servers import SeaweedS3Server

RUN = "run-keep"


@pytest.fixture
def store(seaweed_server: SeaweedS3Server, prefix: str) -> Iterator[S3Channel]:
    channel = S3Channel(seaweed_server.buckets[0], prefix, client=seaweed_server.client())
    yield channel
    channel.delete_prefix("")
    channel.close()


def _commit(store: S3Channel, iteration: int, epoch: int, parent: tuple[int, int]) -> None:
    put_objects(store, RUN, iteration, epoch, 0, {"model": b"weights %d" % iteration})
    commit_manifest(store, RUN, iteration, epoch, workers=1, timeout_s=5,
                    meta={RESUMED_FROM: resumed_from(*parent)})


def _groups(store: S3Channel) -> set[tuple[int, int]]:
    return {group for key in store.list_keys(checkpoints_prefix(RUN))
            if (group := checkpoint_group(key)) is not None}


def test_only_the_newest_of_the_chain_stay(store: S3Channel) -> None:
    _commit(store, 10, 1, (0, 0))
    put_objects(store, RUN, 20, 2, 0, {"model": b"a crashed attempt's part"})  # dead epoch 2
    _commit(store, 20, 3, (10, 1))  # its retry
    _commit(store, 30, 4, (20, 3))
    _commit(store, 40, 5, (30, 4))  # an orphan: committed, then its segment failed
    _commit(store, 35, 6, (30, 4))  # the shortened rerun the chain goes on from
    put_objects(store, RUN, 50, 7, 0, {"model": b"a newer segment's part"})
    # a late trigger of the finished segment at 30 cannot touch anything after it
    assert prune_checkpoints(store, RUN, 30, 4, keep=2) > 0
    assert _groups(store) == {(20, 3), (30, 4), (40, 5), (35, 6), (50, 7)}
    assert prune_checkpoints(store, RUN, 35, 6, keep=2) > 0
    assert _groups(store) == {(30, 4), (35, 6), (40, 5), (50, 7)}  # 40 is beyond 35
    assert prune_checkpoints(store, RUN, 35, 6, keep=1) > 0
    assert _groups(store) == {(35, 6), (40, 5), (50, 7)}


def test_nothing_is_deleted_unless_the_newest_is_committed(store: S3Channel) -> None:
    _commit(store, 10, 1, (0, 0))
    put_objects(store, RUN, 20, 2, 0, {"model": b"parts, no manifest"})
    assert prune_checkpoints(store, RUN, 20, 2, keep=1) == 0
    assert _groups(store) == {(10, 1), (20, 2)}
