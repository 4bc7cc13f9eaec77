"""fasdl/run/reshape.py: an adaptive run's change of W, K or the per-role batches restores
every worker of the new configuration from the old one's checkpoint by the written rule, the
same way on every attempt, at an epoch's start (issue 42, step 4)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fasdl.contract.plan import Plan
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.run.checkpoint import (
    CheckpointError,
    Manifest,
    commit_manifest,
    load_manifest,
    save_worker,
)
from fasdl.run.reshape import (
    CONFIGURATION,
    changed,
    configuration_label,
    restore_reshaped,
)
from fasdl.training.data import DataCursor, write_dataset
from tests.runtime.checkpoint_cluster import RUN, Cluster
from tests.runtime.kreduce_helpers import make_plan

SAMPLES = 32
SHAPE = (3, 32, 32)
NETWORK = "mobilenet"  # small, with batch-norm buffers
PER_EPOCH = 2  # iterations: 32 samples at a global batch of 16


pytestmark = pytest.mark.usefixtures("deterministic_torch")  # tests/runtime/conftest.py


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("reshape")
    rng = np.random.default_rng(3)
    write_dataset(root / "data" / "train",
                  rng.integers(0, 256, (SAMPLES, *SHAPE), dtype=np.uint8),
                  rng.integers(0, 4, SAMPLES).astype(np.int64))
    return root / "data"


def plan(workers: int, aggregators: int, batch_a: int, batch_n: int, **exchange: Any) -> Plan:
    made = make_plan(workers, aggregators, batch_a, batch_n, "hap", samples=SAMPLES,
                     model=NETWORK, learning_rate=0.01, **exchange)
    return dataclasses.replace(made, training=dataclasses.replace(made.training, epochs=3))


def checkpointed(old: Plan, dataset: Path, cache: Path, iterations: int
                 ) -> tuple[MemoryChannel, Manifest, Cluster]:
    """The old configuration trained ``iterations`` and checkpointed as a segment does."""
    cluster = Cluster(old, dataset, cache, epoch=1, model_seed=1, network=NETWORK, shape=SHAPE)
    store = MemoryChannel()
    cluster.run(range(iterations))
    for worker, stream in zip(cluster.workers, cluster.streams, strict=True):
        save_worker(store, RUN, 1, worker, stream.cursor)
    commit_manifest(store, RUN, iterations, 1, workers=len(cluster.workers), timeout_s=10.0,
                    meta={CONFIGURATION: configuration_label(old)})
    return store, load_manifest(store, RUN, iterations, 1), cluster


def reshaped(new: Plan, store: MemoryChannel, manifest: Manifest, dataset: Path,
             cache: Path) -> tuple[Cluster, list[DataCursor]]:
    cluster = Cluster(new, dataset, cache, epoch=2, model_seed=99, network=NETWORK,
                      shape=SHAPE)
    cursors = [restore_reshaped(store, manifest, worker, new) for worker in cluster.workers]
    for stream, cursor in zip(cluster.streams, cursors, strict=True):
        stream.cursor = cursor
    return cluster, cursors


@pytest.mark.parametrize(("old", "new"), [
    (plan(2, 1, 4, 12), plan(3, 1, 4, 6)),  # scale out at the same global batch
    (plan(3, 1, 4, 6), plan(2, 2, 8, 8)),  # scale in, another K
    (plan(2, 1, 4, 12, exchange_dtype="bfloat16"),
     plan(3, 2, 4, 8, exchange_dtype="bfloat16")),
])
def test_a_change_restores_every_new_worker_by_the_rule(
        dataset: Path, tmp_path: Path, old: Plan, new: Plan) -> None:
    assert old.global_batch == new.global_batch == SAMPLES // PER_EPOCH
    store, manifest, trained = checkpointed(old, dataset, tmp_path / "cache", PER_EPOCH)
    assert changed(manifest, new) and not changed(manifest, old)
    cluster, cursors = reshaped(new, store, manifest, dataset, tmp_path / "cache")
    merged = trained.workers[0].parameters
    assert cursors == [DataCursor(epoch=1, position=0)] * new.deployment.workers
    old_workers = old.deployment.workers
    for index, worker in enumerate(cluster.workers):
        assert np.array_equal(worker.parameters, merged)  # a HAP non-aggregator's own dropped
        for name, vector in worker.optimizer_state.items():
            if index < old_workers:  # its own
                expected = trained.workers[index].optimizer_state[name]
            else:  # the old workers' mean
                stacked = np.stack([w.optimizer_state[name].astype(np.float64)
                                    for w in trained.workers])
                expected = (np.add.reduce(stacked) / old_workers).astype(vector.dtype)
            assert np.array_equal(vector, expected), (index, name)
        for name, vector in worker.exchange_state.items():
            start = int(getattr(worker.codec, "own_start", 0))
            expected = {"exchange_residual": np.zeros_like(vector),
                        "exchange_reference": merged,
                        "exchange_previous": merged[start:start + vector.size]}[name]
            assert np.array_equal(vector, expected), (index, name)
        assert_buffers(worker.model, [w.model for w in trained.workers], index)
    # the new configuration trains on, and a second restore (a retried segment) trains the same
    cluster.run(range(PER_EPOCH, 2 * PER_EPOCH))
    again, _ = reshaped(new, store, manifest, dataset, tmp_path / "cache")
    again.run(range(PER_EPOCH, 2 * PER_EPOCH))
    for first, second in zip(cluster.workers, again.workers, strict=True):
        assert np.isfinite(first.parameters).all()
        assert np.array_equal(first.parameters, second.parameters)


def assert_buffers(model: torch.nn.Module, old: list[torch.nn.Module], index: int) -> None:
    """Worker ``index``'s batch-norm buffers: its own, or for a new worker the old workers'
    float mean (integer buffers: worker 0's)."""
    buffers = dict(model.named_buffers())
    assert buffers
    for name, first in old[0].named_buffers():
        if index < len(old):
            expected = dict(old[index].named_buffers())[name]
        elif first.is_floating_point():
            stacked = torch.stack([dict(m.named_buffers())[name].double() for m in old])
            expected = (stacked.sum(dim=0) / len(old)).to(first.dtype)
        else:
            expected = first
        assert torch.equal(buffers[name], expected), (index, name)


def test_a_change_inside_an_epoch_is_refused(dataset: Path, tmp_path: Path) -> None:
    old, new = plan(2, 1, 4, 12), plan(3, 1, 4, 6)
    store, manifest, _ = checkpointed(old, dataset, tmp_path / "cache", 1)
    cluster = Cluster(new, dataset, tmp_path / "cache", epoch=2, model_seed=99,
                      network=NETWORK, shape=SHAPE)
    with pytest.raises(CheckpointError, match=r"applies at an epoch's start only: the "
                                              r"checkpoint resumes at iteration 1, inside "
                                              r"epoch 0 \(2 iterations each\)"):
        restore_reshaped(store, manifest, cluster.workers[0], new)


def test_a_manifest_without_the_entry_changes_only_with_its_w(
        dataset: Path, tmp_path: Path) -> None:
    old = plan(2, 1, 4, 12)
    _, manifest, _ = checkpointed(old, dataset, tmp_path / "cache", PER_EPOCH)
    bare = Manifest(manifest.run, manifest.resume_iteration, manifest.epoch, manifest.workers,
                    manifest.objects, {})
    assert not changed(bare, plan(2, 2, 8, 8))  # written before the entry: W alone tells
    assert changed(bare, plan(3, 1, 4, 6))
