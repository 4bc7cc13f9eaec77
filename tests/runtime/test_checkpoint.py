"""Segment checkpoints: kill/restart reproduces the undisturbed run bitwise; damage is caught."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fasdl.contract.keys import checkpoint_object_key, manifest_key
from fasdl.exchange.channel.base import ChannelTimeout
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.run.checkpoint import (
    CheckpointError,
    commit_manifest,
    load_manifest,
    put_objects,
    read_object,
    restore_worker,
    save_worker,
)
from fasdl.training.data import DataCursor, write_dataset
from fasdl.training.networks import build_model
from tests.runtime.checkpoint_cluster import RUN, SHAPE, Cluster
from tests.runtime.kreduce_helpers import make_plan

RGB_SHAPE = (3, 8, 8)
# the recipe a BERT or CIFAR run would use: every piece of state and randomness it adds
RECIPE = {"optimizer": "adamw", "lr_schedule": "cosine", "warmup_iterations": 2,
          "augmentation": "cifar", "weight_decay": 0.01, "learning_rate": 0.01}


pytestmark = pytest.mark.usefixtures("deterministic_torch")  # tests/runtime/conftest.py


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    rng = np.random.default_rng(7)
    write_dataset(tmp_path / "data" / "train", rng.integers(0, 256, (64, *SHAPE), dtype=np.uint8),
                  rng.integers(0, 4, 64).astype(np.int64))
    return tmp_path / "data"


@pytest.fixture
def rgb_dataset(tmp_path: Path) -> Path:
    rng = np.random.default_rng(8)
    write_dataset(tmp_path / "rgb" / "train",
                  rng.integers(0, 256, (64, *RGB_SHAPE), dtype=np.uint8),
                  rng.integers(0, 4, 64).astype(np.int64))
    return tmp_path / "rgb"


@pytest.mark.parametrize(("aggregators", "sync", "first_segment", "exchange"), [
    (1, "hap", 3, {}), (2, "hap", 1, {}), (2, "bsp", 2, {}),
    # bfloat16 uploads: the reference, residual and previous merged shard resume too
    (1, "hap", 3, {"exchange_dtype": "bfloat16"}), (2, "bsp", 2, {"exchange_dtype": "bfloat16"}),
    (2, "hap", 1, {"exchange_dtype": "bfloat16", "exchange_chunks": 2}),
    # the paper's HAP merge, restarted inside a warm-up from a scaled plan's base rate
    (1, "hap", 3, {"hap_merge": "paper", "warmup_iterations": 4,
                   "warmup_start_learning_rate": 0.025}),
])
def test_restart_from_manifest_reproduces_the_undisturbed_run_bitwise(
        dataset: Path, tmp_path: Path, aggregators: int, sync: str, first_segment: int,
        exchange: dict[str, Any]) -> None:
    plan = make_plan(3, aggregators, 4, 6, sync, samples=64, model="cnn", **exchange)
    total = 6  # 4 iterations per epoch: the restart lands mid-epoch and crosses an epoch
    undisturbed = Cluster(plan, dataset, tmp_path / "cache", epoch=1, model_seed=1)
    undisturbed.run(range(total))

    store = MemoryChannel()
    first = Cluster(plan, dataset, tmp_path / "cache", epoch=1, model_seed=1)
    first.run(range(first_segment), store)
    del first  # the invocations die; only the checkpoint bucket survives
    resumed = Cluster(plan, dataset, tmp_path / "cache", epoch=2, model_seed=99)
    resumed.restore(store, first_segment, 1)
    resumed.run(range(first_segment, total))

    for expected, actual in zip(undisturbed.workers, resumed.workers, strict=True):
        assert np.array_equal(expected.parameters, actual.parameters)
        for name, vector in expected.optimizer_state.items():
            assert np.array_equal(vector, actual.optimizer_state[name]), name
        assert expected.exchange_state.keys() == actual.exchange_state.keys()
        for name, vector in expected.exchange_state.items():
            assert np.array_equal(vector, actual.exchange_state[name]), name
    assert [s.cursor for s in resumed.streams] == [s.cursor for s in undisturbed.streams]


@pytest.mark.parametrize(("aggregators", "sync", "first_segment"), [(1, "hap", 3), (2, "bsp", 2)])
def test_adamw_schedule_and_augmentation_resume_bitwise(
        rgb_dataset: Path, tmp_path: Path, aggregators: int, sync: str, first_segment: int
) -> None:
    plan = make_plan(3, aggregators, 4, 6, sync, samples=64, model="cnn", **RECIPE)
    total = 6  # past one epoch and past the warm-up, the restart inside both
    undisturbed = Cluster(plan, rgb_dataset, tmp_path / "cache", 1, 1, shape=RGB_SHAPE)
    initial = undisturbed.workers[0].parameters.copy()
    undisturbed.run(range(total))

    store = MemoryChannel()
    first = Cluster(plan, rgb_dataset, tmp_path / "cache", 1, 1, shape=RGB_SHAPE)
    first.run(range(first_segment), store)
    del first
    resumed = Cluster(plan, rgb_dataset, tmp_path / "cache", 2, 99, shape=RGB_SHAPE)
    resumed.restore(store, first_segment, 1)
    resumed.run(range(first_segment, total))

    assert not np.array_equal(initial, undisturbed.workers[0].parameters)
    for expected, actual in zip(undisturbed.workers, resumed.workers, strict=True):
        assert set(expected.optimizer_state) == {"exp_avg", "exp_avg_sq"}
        assert np.array_equal(expected.parameters, actual.parameters)
        for name, vector in expected.optimizer_state.items():
            assert vector.any(), name  # the state moved, and was restored
            assert np.array_equal(vector, actual.optimizer_state[name]), name


def _one_worker_checkpoint(model: nn.Module) -> tuple[MemoryChannel, KReduceWorker]:
    plan = make_plan(1, 1, 4, 4, "bsp")
    worker = KReduceWorker(plan, 0, MemoryChannel(), model, RUN, 0)
    worker.step(torch.randn(4, *SHAPE), torch.randint(0, 4, (4,)), 0)
    store = MemoryChannel()
    assert save_worker(store, RUN, 0, worker, DataCursor(0, 1), np.random.default_rng(5)) == 1
    commit_manifest(store, RUN, 1, 0, workers=1)
    return store, worker


def test_batch_norm_statistics_and_rng_state_round_trip() -> None:
    def model() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.BatchNorm1d(8), nn.Linear(8, 4))

    store, trained = _one_worker_checkpoint(model())
    fresh = KReduceWorker(make_plan(1, 1, 4, 4, "bsp"), 0, MemoryChannel(), model(), RUN, 0)
    rng = np.random.default_rng(123)
    cursor = restore_worker(store, load_manifest(store, RUN, 1, 0), fresh, rng)
    assert cursor == DataCursor(0, 1)
    assert rng.integers(1 << 30) == np.random.default_rng(5).integers(1 << 30)
    assert np.array_equal(fresh.parameters, trained.parameters)
    for (name, a), (_, b) in zip(trained.model.named_buffers(), fresh.model.named_buffers(),
                                 strict=True):
        assert torch.equal(a, b), name


def test_corrupted_object_is_rejected() -> None:
    store, worker = _one_worker_checkpoint(build_model("cnn", 4, SHAPE))
    key = checkpoint_object_key(RUN, 1, 0, "model")
    damaged = bytearray(store.try_get(key) or b"")
    damaged[-1] ^= 0x01
    store.put(key, bytes(damaged))
    with pytest.raises(CheckpointError, match="checksum"):
        restore_worker(store, load_manifest(store, RUN, 1, 0), worker)


def test_missing_or_malformed_manifest_is_rejected() -> None:
    store, _ = _one_worker_checkpoint(build_model("cnn", 4, SHAPE))
    with pytest.raises(CheckpointError, match="no checkpoint manifest"):
        load_manifest(store, RUN, 2, 0)
    text = json.loads(store.try_get(manifest_key(RUN, 1, 0)) or b"")
    store.put(manifest_key(RUN, 1, 0), json.dumps({**text, "resume_iteration": 4}).encode())
    with pytest.raises(CheckpointError, match="iteration 4"):
        load_manifest(store, RUN, 1, 0)
    store.put(manifest_key(RUN, 1, 0), b"{not json")
    with pytest.raises(CheckpointError, match="malformed"):
        load_manifest(store, RUN, 1, 0)


def test_missing_object_and_unfinished_parts_are_errors() -> None:
    store, _ = _one_worker_checkpoint(build_model("cnn", 4, SHAPE))
    manifest = load_manifest(store, RUN, 1, 0)
    store.delete([manifest.objects["model"].key])
    with pytest.raises(CheckpointError, match="missing"):
        read_object(store, manifest, "model")
    with pytest.raises(CheckpointError, match="no object"):
        read_object(store, manifest, "nope")
    put_objects(store, RUN, 5, 0, 0, {"model": b"x"})
    put_objects(store, RUN, 5, 0, 1, {"other": b"y"})  # epoch 0 dies before committing
    put_objects(store, RUN, 5, 1, 0, {"model": b"z"})  # epoch 1: worker 1 never finishes
    with pytest.raises(ChannelTimeout, match="parts/0001"):  # rerun like a dead peer
        commit_manifest(store, RUN, 5, 1, workers=2, timeout_s=0.2)
    assert store.try_get(manifest_key(RUN, 5, 1)) is None  # no manifest without every part
    put_objects(store, RUN, 5, 1, 1, {"other": b"w"})
    manifest = commit_manifest(store, RUN, 5, 1, workers=2, timeout_s=1.0)
    assert read_object(store, load_manifest(store, RUN, 5, 1), "other") == b"w"
    assert manifest.last_iteration == 4 and manifest.epoch == 1
    # a late committer of the same epoch (a duplicate) can never replace the manifest
    put_objects(store, RUN, 5, 1, 0, {"model": b"late"})
    with pytest.raises(CheckpointError, match="exists already"):
        commit_manifest(store, RUN, 5, 1, workers=2, timeout_s=1.0)
    assert read_object(store, load_manifest(store, RUN, 5, 1), "other") == b"w"
    with pytest.raises(CheckpointError, match="no checkpoint manifest of epoch 0"):
        load_manifest(store, RUN, 5, 0)  # epoch 0's parts never became a checkpoint


class _DiscardingStore(MemoryChannel):
    """Keeps only the sizes of large objects, so what save_worker holds is all that's traced."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: dict[str, int] = {}

    def put(self, key: str, data: bytes | bytearray) -> None:
        self.sizes[key] = len(data)
        super().put(key, data if len(data) < 1 << 16 else b"")


def test_a_worker_writes_its_share_one_object_at_a_time() -> None:
    """Worker 0's share is its momentum, the merged model and, at the run's end, the export,
    each the model's size: made and written one after the other, at most one is held (all at
    once took worker 0 past its memory size at the end of a segment)."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16_384), nn.Linear(16_384, 4))  # 6.3 MB
    worker = KReduceWorker(make_plan(1, 1, 4, 4, "bsp"), 0, MemoryChannel(), model, RUN, 0)
    worker.step(torch.randn(4, *SHAPE), torch.randint(0, 4, (4,)), 0)
    model_bytes = worker.parameters.nbytes
    store = _DiscardingStore()
    tracemalloc.start()
    try:
        save_worker(store, RUN, 0, worker, DataCursor(0, 1),
                    extra_objects={"export": lambda: bytes(model_bytes)})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    large = [size for size in store.sizes.values() if size >= model_bytes]
    assert len(large) == 3  # momentum, model, export
    assert peak < 1.5 * model_bytes, (peak, model_bytes)
