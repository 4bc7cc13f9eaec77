"""Training-step overhead of KReduceWorker (W=1, K=1) against a plain torch loop.

Both sides train the same model on the same batch with the same thread count: the plain loop
uses torch.optim.SGD(momentum) over the module's parameters, the worker its flat-buffer SGD
plus the (empty, W=1) exchange. Blocks of steps alternate between the two so drift in the
machine hits both alike. On a shared, loaded machine wall-clock block times vary several-fold,
so the headline uses process CPU time (one torch thread, nothing else running in the process:
CPU time is the work done, whatever the neighbours do); wall-clock ratios are reported too.

ratio = plain CPU time per step / worker CPU time per step, medians over blocks (goal >= 0.95).
The last line printed is JSON. ``--smoke`` (or FASDL_BENCH_SMOKE=1, bench/smoke.py): two
blocks of one step.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable, Sequence

import torch
from torch import nn

from bench.smoke import parse_args
from fasdl.contract.plan import Deployment, Plan, Training, Workload
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.training.networks import build_model

GOAL = 0.95


def single_worker_plan(model: str, batch: int) -> Plan:
    return Plan(
        workload=Workload(name="bench", model=model, dataset="bench/data", samples=batch * 1000,
                          dataset_mb=1.0, model_mb=1.0),
        deployment=Deployment(channel="s3", arch="x86_64", memory_mb=3008, workers=1),
        training=Training(aggregators=1, batch_aggregator=batch, batch_non_aggregator=batch,
                          max_global_batch=batch, epochs=1, segment_iterations=1000,
                          sync="bsp", learning_rate=0.01, momentum=0.9),
    )


def block_time(step: Callable[[], None], steps: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per step over one block."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(steps):
        step()
    return (time.process_time() - cpu) / steps, (time.perf_counter() - wall) / steps


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--steps", type=int, default=5, help="steps per block")
    args = parse_args(parser, argv, blocks=2, steps=1)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(args.model)
    x = torch.rand(args.batch, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch,))

    plain_model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def plain_step() -> None:
        plain_model.train()
        optimizer.zero_grad()
        loss = loss_fn(plain_model(x), y)
        loss.backward()
        optimizer.step()
        float(loss.detach())  # the worker reports the loss too

    worker = KReduceWorker(single_worker_plan(args.model, args.batch), 0, MemoryChannel(),
                           copy.deepcopy(model), "bench", 0)
    iteration = iter(range(10**9))

    def worker_step() -> None:
        worker.step(x, y, next(iteration))

    for step in (plain_step, worker_step):  # warm-up: allocator, kernels, first momentum
        block_time(step, 3)
    plain: list[tuple[float, float]] = []
    flat: list[tuple[float, float]] = []
    for _ in range(args.blocks):
        plain.append(block_time(plain_step, args.steps))
        flat.append(block_time(worker_step, args.steps))

    def median(samples: list[tuple[float, float]], index: int) -> float:
        return statistics.median(sample[index] for sample in samples)

    plain_cpu, worker_cpu = median(plain, 0), median(flat, 0)
    ratio = plain_cpu / worker_cpu
    wall_median = median(plain, 1) / median(flat, 1)
    wall_best = min(p[1] for p in plain) / min(f[1] for f in flat)
    print(f"{args.model} batch {args.batch}, {args.threads} threads: plain "
          f"{plain_cpu * 1e3:.2f} ms/step, KReduceWorker {worker_cpu * 1e3:.2f} ms/step (CPU); "
          f"wall-clock ratio median {wall_median:.3f}, best blocks {wall_best:.3f}")
    print(json.dumps({
        "bench": "step_overhead", "model": args.model, "batch": args.batch,
        "threads": args.threads, "plain_cpu_ms": round(plain_cpu * 1e3, 3),
        "worker_cpu_ms": round(worker_cpu * 1e3, 3), "ratio": round(ratio, 4),
        "wall_ratio_median": round(wall_median, 4), "wall_ratio_best": round(wall_best, 4),
        "goal": GOAL, "ok": ratio >= GOAL,
    }))


if __name__ == "__main__":
    main()
