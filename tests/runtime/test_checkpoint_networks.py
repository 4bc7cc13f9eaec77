"""The registry's batch-norm CNNs train through KReduceWorker on a CIFAR-shaped subset and
resume from a checkpoint bitwise: parameters, momentum and each worker's own batch-norm
statistics (issue 13)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.training.data import write_dataset
from tests.runtime.checkpoint_cluster import Cluster
from tests.runtime.kreduce_helpers import make_plan

CIFAR_SHAPE = (3, 32, 32)
SAMPLES = 36  # 3 workers x batches of 2 and 4: three iterations an epoch


@pytest.fixture
def cifar_shaped(tmp_path: Path) -> Path:
    rng = np.random.default_rng(11)
    write_dataset(tmp_path / "data" / "train",
                  rng.integers(0, 256, (SAMPLES, *CIFAR_SHAPE), dtype=np.uint8),
                  rng.integers(0, 4, SAMPLES).astype(np.int64))
    return tmp_path / "data"


def _statistics(cluster: Cluster) -> list[list[torch.Tensor]]:
    return [[buffer.clone() for name, buffer in worker.model.named_buffers()
             if name.endswith(("running_mean", "running_var"))] for worker in cluster.workers]


@pytest.mark.slow
@pytest.mark.parametrize("network", ["resnet18", "resnet50", "mobilenet", "squeezenet"])
def test_a_network_resumes_bitwise_from_its_checkpoint(network: str, cifar_shaped: Path,
                                                       tmp_path: Path) -> None:
    plan = make_plan(3, 1, 2, 4, "hap", samples=SAMPLES, model=network, learning_rate=0.01)
    total, first_segment = 5, 2  # the restart crosses an epoch boundary
    cache = tmp_path / "cache"
    undisturbed = Cluster(plan, cifar_shaped, cache, 1, 1, network, CIFAR_SHAPE)
    initial = undisturbed.workers[0].parameters.copy()
    initial_statistics = _statistics(undisturbed)
    undisturbed.run(range(total))

    store = MemoryChannel()
    first = Cluster(plan, cifar_shaped, cache, 1, 1, network, CIFAR_SHAPE)
    first.run(range(first_segment), store)
    del first
    resumed = Cluster(plan, cifar_shaped, cache, 2, 99, network, CIFAR_SHAPE)
    resumed.restore(store, first_segment, 1)
    resumed.run(range(first_segment, total))

    assert not np.array_equal(initial, undisturbed.workers[0].parameters)  # it trained
    for expected, actual in zip(undisturbed.workers, resumed.workers, strict=True):
        assert np.array_equal(expected.parameters, actual.parameters)
        assert np.array_equal(expected.optimizer_state["momentum"],
                              actual.optimizer_state["momentum"])
    after, again = _statistics(undisturbed), _statistics(resumed)
    for worker, (before, trained, restored) in enumerate(
            zip(initial_statistics, after, again, strict=True)):
        assert len(trained) == len(restored)
        assert all(torch.equal(a, b) for a, b in zip(trained, restored, strict=True)), worker
        if network != "squeezenet":  # the only one without batch norm
            assert trained and not all(torch.equal(a, b) for a, b in zip(before, trained,
                                                                          strict=True))
