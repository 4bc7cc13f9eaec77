"""W fresh in-process workers that train, checkpoint and restore as a new set of Lambda
invocations would (test_checkpoint.py, test_checkpoint_networks.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from fasdl.contract.plan import Plan
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.run.checkpoint import commit_manifest, load_manifest, restore_worker, save_worker
from fasdl.training.augment import training_tensors
from fasdl.training.data import BatchStream, LocalFiles, load_partition, partition_bounds
from fasdl.training.networks import build_model
from tests.runtime.kreduce_helpers import run_parallel

RUN = "ckpt-run"
SHAPE = (1, 8, 8)


class Cluster:
    """W fresh workers, as a new set of Lambda invocations would build them."""

    def __init__(self, plan: Plan, data_root: Path, cache: Path, epoch: int,
                 model_seed: int, network: str = "cnn",
                 shape: tuple[int, int, int] = SHAPE) -> None:
        self.plan = plan
        self.epoch = epoch
        self.exchange = MemoryChannel()  # a new attempt: nothing of the old one is visible
        torch.manual_seed(model_seed)
        model = build_model(network, 4, shape)
        sizes = plan.partition_sizes()
        self.workers: list[KReduceWorker] = []
        self.streams: list[BatchStream] = []
        for index in range(plan.deployment.workers):
            replica = build_model(network, 4, shape)
            replica.load_state_dict(model.state_dict())
            self.workers.append(KReduceWorker(plan, index, self.exchange, replica, RUN, epoch,
                                              wait_timeout_s=60.0))
            start, end = partition_bounds(sizes, index)
            partition = load_partition(LocalFiles(data_root), "train", start, end, cache)
            self.streams.append(BatchStream.for_plan(plan, index, partition))

    def run(self, iterations: range, store: MemoryChannel | None = None) -> None:
        def loop(index: int) -> None:
            worker, stream = self.workers[index], self.streams[index]
            t = self.plan.training
            for iteration in iterations:
                batch = training_tensors(*stream.next_batch(), t.augmentation, seed=t.seed,
                                         worker=index, iteration=iteration)
                worker.step(*batch, iteration)
            if store is not None:
                save_worker(store, RUN, self.epoch, worker, stream.cursor)

        run_parallel([lambda index=index: loop(index)  # type: ignore[misc]
                      for index in range(len(self.workers))])
        if store is not None:
            commit_manifest(store, RUN, iterations[-1] + 1, self.epoch,
                            workers=len(self.workers), timeout_s=10.0)

    def restore(self, store: MemoryChannel, resume_iteration: int, epoch: int) -> None:
        manifest = load_manifest(store, RUN, resume_iteration, epoch)
        for worker, stream in zip(self.workers, self.streams, strict=True):
            stream.cursor = restore_worker(store, manifest, worker)
