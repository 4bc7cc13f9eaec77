"""Test plans and in-process K-REDUCE workers: each worker in its own thread over one memory
channel (test_kreduce.py and the runtime, planner and integration tests built on it)."""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fasdl.contract.plan import Deployment, Plan, Training, Workload
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.kreduce import KReduceWorker

INPUT_SHAPE = (1, 4, 4)
CLASSES = 3


def make_plan(workers: int, aggregators: int, batch_a: int, batch_n: int, sync: str, *,
              learning_rate: float = 0.1, momentum: float = 0.9, samples: int = 10_000,
              model: str = "mlp", **recipe: Any) -> Plan:
    return Plan(
        workload=Workload(name="test", model=model, dataset="data/test", samples=samples,
                          dataset_mb=1.0, model_mb=1.0),
        deployment=Deployment(channel="s3", arch="x86_64", memory_mb=1024, workers=workers),
        training=Training(aggregators=aggregators, batch_aggregator=batch_a,
                          batch_non_aggregator=batch_n, max_global_batch=100_000, epochs=1,
                          segment_iterations=1000, sync=sync, learning_rate=learning_rate,
                          momentum=momentum, **recipe),
    )


def plan_with(total_epochs: int = 1, segment_iterations: int = 10, samples: int = 100) -> Plan:
    """W = 4, K = 2 HAP with B^g = 10, cut into segments of ``segment_iterations``."""
    plan = make_plan(4, 2, 2, 3, "hap", samples=samples)
    return dataclasses.replace(plan, training=dataclasses.replace(
        plan.training, epochs=total_epochs, segment_iterations=segment_iterations))


def run_parallel(tasks: list[Callable[[], None]]) -> None:
    """Run each task in its own thread; re-raise the first failure."""
    errors: list[BaseException] = []

    def guarded(task: Callable[[], None]) -> None:
        try:
            task()
        except BaseException as error:  # surfaced in the main thread below
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(task,)) for task in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    assert not any(thread.is_alive() for thread in threads), "a worker hung"


Batches = list[list[tuple[torch.Tensor, torch.Tensor]]]  # [worker][iteration]


def random_batches(plan: Plan, iterations: int, seed: int = 1) -> Batches:
    generator = torch.Generator().manual_seed(seed)
    return [[(torch.randn(plan.batch_of(w), *INPUT_SHAPE, generator=generator),
              torch.randint(0, CLASSES, (plan.batch_of(w),), generator=generator))
             for _ in range(iterations)] for w in range(plan.deployment.workers)]


def make_workers(plan: Plan, model: nn.Module, channel: MemoryChannel,
                 **kwargs: object) -> list[KReduceWorker]:
    return [KReduceWorker(plan, w, channel, copy.deepcopy(model), "run-1", 0,
                          wait_timeout_s=60.0, **kwargs)  # type: ignore[arg-type]
            for w in range(plan.deployment.workers)]


def drive(workers: list[KReduceWorker], batches: Batches, iterations: range,
          after_step: Callable[[KReduceWorker, int], None] | None = None) -> None:
    def loop(worker: KReduceWorker) -> Callable[[], None]:
        def run() -> None:
            for iteration in iterations:
                x, y = batches[worker.worker_id][iteration]
                worker.step(x, y, iteration)
                if after_step is not None:
                    after_step(worker, iteration)
        return run

    run_parallel([loop(worker) for worker in workers])
