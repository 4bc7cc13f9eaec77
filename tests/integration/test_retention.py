"""The results bucket keeps the newest FASDL_KEEP_CHECKPOINTS checkpoints of a run's chain and
nothing of a dead attempt (fasdl.run.retention), on the real SeaweedFS S3 server."""

from __future__ import annotations

from fasdl.contract.keys import checkpoint_group, checkpoints_prefix
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.run.checkpoint import commit_manifest, put_objects
from fasdl.run.retention import RESUMED_FROM, prune_checkpoints, resumed_from

RUN = "run-keep"


def _commit(results_store: S3Channel, iteration: int, epoch: int, parent: tuple[int, int]) -> None:
    put_objects(results_store, RUN, iteration, epoch, 0, {"model": b"weights %d" % iteration})
    commit_manifest(results_store, RUN, iteration, epoch, workers=1, timeout_s=5,
                    meta={RESUMED_FROM: resumed_from(*parent)})


def _groups(results_store: S3Channel) -> set[tuple[int, int]]:
    return {group for key in results_store.list_keys(checkpoints_prefix(RUN))
            if (group := checkpoint_group(key)) is not None}


def test_only_the_newest_of_the_chain_stay(results_store: S3Channel) -> None:
    _commit(results_store, 10, 1, (0, 0))
    put_objects(results_store, RUN, 20, 2, 0, {"model": b"a crashed attempt"})  # dead epoch 2
    _commit(results_store, 20, 3, (10, 1))  # its retry
    _commit(results_store, 30, 4, (20, 3))
    _commit(results_store, 40, 5, (30, 4))  # an orphan: committed, then its segment failed
    _commit(results_store, 35, 6, (30, 4))  # the shortened rerun the chain goes on from
    put_objects(results_store, RUN, 50, 7, 0, {"model": b"a newer segment's part"})
    # a late trigger of the finished segment at 30 cannot touch anything after it
    assert prune_checkpoints(results_store, RUN, 30, 4, keep=2) > 0
    assert _groups(results_store) == {(20, 3), (30, 4), (40, 5), (35, 6), (50, 7)}
    assert prune_checkpoints(results_store, RUN, 35, 6, keep=2) > 0
    assert _groups(results_store) == {(30, 4), (35, 6), (40, 5), (50, 7)}  # 40 is beyond 35
    assert prune_checkpoints(results_store, RUN, 35, 6, keep=1) > 0
    assert _groups(results_store) == {(35, 6), (40, 5), (50, 7)}


def test_nothing_is_deleted_unless_the_newest_is_committed(results_store: S3Channel) -> None:
    _commit(results_store, 10, 1, (0, 0))
    put_objects(results_store, RUN, 20, 2, 0, {"model": b"parts, no manifest"})
    assert prune_checkpoints(results_store, RUN, 20, 2, keep=1) == 0
    assert _groups(results_store) == {(10, 1), (20, 2)}
