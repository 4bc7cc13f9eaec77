"""Peak resident memory of each K-REDUCE role, measured, against the planner's model.

For a workload the planner plans (W, M, K, B^a, B^n) as in the paper's Table IV problems;
every worker of that plan then runs in its own fresh interpreter for a few iterations, each a
training step at its batch and an exchange step (upload, aggregate, load the merged shards)
through a real S3-compatible server (the plans' channel). Each reports its peak resident set
(VmHWM: the kernel's high-water mark since exec, the figure Lambda's memory limit holds a
function to; ``ru_maxrss`` would also count the parent's size at fork) next to the planner's
modelled memory of its role, k·B + c + X_role (planner/model/terms/memory.py). The measured
step runs under bsp so that a non-aggregator downloads in it (under hap it moves the same bytes
one step later).

``--batch`` replaces the plan's batches (the exchange term does not depend on them);
``--slope`` also measures at twice that batch and reports the per-sample memory, for
comparison with the workload's k (measured here at B = 64 and 128: resnet50 1.7-2.5,
mobilenet 1.4-1.5, squeezenet 1.9-2.4 MB per sample against k = 5.0, 7.2 and 2.1).

    python -m bench.memory_roles [--workload squeezenet-cifar10 ...] [--batch 4] [--slope]
                                 [--steps 4]

Prints one JSON object as its last line. ``--smoke`` (or FASDL_BENCH_SMOKE=1,
bench/smoke.py): squeezenet-cifar10's plan at B = 4, one iteration per worker.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench.smoke import parse_args

# The paper's Table IV problems: deadline (s), B^g_max, and the configuration whose predicted
# epoch time sets E (tests/planner/test_paper.py builds the same problems).
TABLE_IV: dict[str, tuple[float, int, tuple[int, int, int, int, int]]] = {
    "resnet50-cifar10": (8000, 1024, (7, 1536, 128, 4, 170)),
    "mobilenet-cifar10": (4000, 512, (3, 1920, 128, 1, 192)),
    "squeezenet-cifar10": (3000, 384, (2, 768, 128, 1, 201)),
}
WORKLOADS = tuple(TABLE_IV)
MIB = 1 << 20
# Iterations each worker runs: under glibc's default allocator the peak grew for six steps
# (fasdl/aws/heap.py); with the runtime's allocator settings it is flat from the third.
STEPS = 4
ROOT = Path(__file__).resolve().parent.parent


def planned(name: str) -> Any:
    """The planner's K-REDUCE plan for the workload's Table IV problem."""
    from planner.commands.planfile import to_plan
    from planner.model.inputs.problem import Problem
    from planner.model.inputs.profiles import load_platform, load_prices, load_workload
    from planner.model.terms.cost_model import evaluate
    from planner.search.searches import exact

    deadline, cap, (w, m, ba, k, bn) = TABLE_IV[name]
    problem = Problem(workload=load_workload(name), platform=load_platform("s3"),
                      prices=load_prices(), epochs=1, deadline_s=deadline, max_global_batch=cap)
    per_epoch = float(evaluate(problem, w, m, k, ba, bn).time_s[0])
    problem = dataclasses.replace(problem, epochs=int(deadline // per_epoch), min_workers=2)
    choice = exact(problem).choice
    if choice is None:
        raise RuntimeError(f"{name}: the planner found no plan")
    return to_plan(problem, choice, search="exact")


def with_batches(plan: Any, batch: int | None) -> Any:
    """The plan measured under bsp, its batches replaced by ``batch`` if given."""
    training = dataclasses.replace(plan.training, sync="bsp")
    if batch is not None:
        training = dataclasses.replace(training, batch_aggregator=batch,
                                       batch_non_aggregator=batch)
    return dataclasses.replace(plan, training=training)


def modelled_mb(plan: Any, worker: int) -> tuple[float, float]:
    """(modelled memory of this worker's role, the cap C) in MB."""
    from fasdl.exchange.inflight import default_inflight_mb
    from planner.model.inputs.profiles import load_workload
    from planner.model.terms.memory import role_memory_mb

    workload = load_workload(str(plan.provenance["workload_profile"]))
    d, t = plan.deployment, plan.training
    aggregator, non_aggregator = role_memory_mb(
        workload, d.memory_mb, d.workers, t.aggregators, t.batch_aggregator,
        t.batch_non_aggregator, d.channel)
    role = aggregator if worker < t.aggregators else non_aggregator
    return float(role), float(default_inflight_mb(d.memory_mb, workload.model_mb))


def measure(plans: list[Any], server: Any, steps: int = STEPS) -> list[dict[str, Any]]:
    """Run every worker of every plan at once, each in a fresh interpreter; their reports.

    Each process's peak is its own, so running them together only saves wall time.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AWS_ACCESS_KEY_ID": server.access_key,
           "AWS_SECRET_ACCESS_KEY": server.secret_key}
    with tempfile.TemporaryDirectory() as folder:
        started = []
        for index, plan in enumerate(plans):
            path = Path(folder) / f"plan-{index}.json"
            path.write_text(plan.to_json())
            run_id = f"mem-{uuid.uuid4().hex[:8]}"
            started += [(plan, worker, subprocess.Popen(
                [sys.executable, "-m", "bench.memory_roles", "--child", str(path), str(worker),
                 server.endpoint_url, server.buckets[0], run_id, str(steps)], cwd=ROOT, env=env,
                stdout=subprocess.PIPE, text=True)) for worker in range(plan.deployment.workers)]
        outputs = [process.communicate(timeout=600)[0] for _, _, process in started]
    rows = []
    for (plan, worker, process), output in zip(started, outputs, strict=True):
        if process.returncode != 0:
            raise RuntimeError(f"{plan.workload.model} worker {worker} exited with "
                               f"{process.returncode}")
        row = json.loads(output.strip().splitlines()[-1])
        row["modelled_mb"], row["cap_mb"] = modelled_mb(plan, worker)
        row["memory_mb"] = plan.deployment.memory_mb
        row["workload"] = str(plan.provenance["workload_profile"])
        rows.append(row)
    return rows


def child(plan_path: str, worker: int, endpoint: str, bucket: str, run_id: str,
          steps: int) -> dict[str, Any]:
    """One worker: ``steps`` iterations of training and exchange; its peak RSS."""
    import torch

    from fasdl.aws import heap
    from fasdl.contract.plan import Plan
    from fasdl.exchange.channel.s3 import S3Channel
    from fasdl.exchange.kreduce import KReduceWorker
    from fasdl.profiling.measure import peak_rss_mb
    from fasdl.training.networks import build_seeded_model

    heap.configure_allocator()  # as the worker handler does at Init
    torch.set_num_threads(1)
    plan = Plan.from_json(Path(plan_path).read_text())
    model = build_seeded_model(plan.workload.model, plan.training.seed)
    channel = S3Channel(bucket, f"{run_id}/", endpoint_url=endpoint, path_style=True,
                        region="us-east-1")
    node = KReduceWorker(plan, worker, channel, model, run_id, 0)
    batch = plan.batch_of(worker)
    generator = torch.Generator().manual_seed(worker)
    x = torch.rand(batch, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (batch,), generator=generator)
    setup = peak_rss_mb()
    for iteration in range(steps):  # the peak of a step can grow with the steps before it
        stats = node.step(x, y, iteration)
    peak = peak_rss_mb()
    budget = getattr(node, "budget", None)
    node.close()
    return {"model": plan.workload.model, "worker": worker,
            "role": "aggregator" if node.is_aggregator else "non-aggregator",
            "batch": batch, "setup_rss_mb": round(setup, 1), "peak_rss_mb": round(peak, 1),
            "frames_peak_mb": round(budget.peak / MIB, 1) if budget is not None else None,
            "frame_mb": (64 + 4 * max(end - start for start, end in node.bounds)) / MIB,
            "bytes_down": stats.bytes_down, "bytes_up": stats.bytes_up}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workload", action="append", choices=WORKLOADS)
    parser.add_argument("--batch", type=int, help="replace the plan's batches")
    parser.add_argument("--slope", action="store_true",
                        help="also measure at 2x --batch and report MB per sample")
    parser.add_argument("--steps", type=int, default=STEPS,
                        help=f"iterations per worker (default {STEPS})")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parse_args(parser, argv, workload=["squeezenet-cifar10"], batch=4, steps=1)
    if args.child:
        path, worker, endpoint, bucket, run_id, steps = args.child
        print(json.dumps(child(path, int(worker), endpoint, bucket, run_id, int(steps))))
        return 0
    from local.servers.managed import SeaweedS3Server

    names = args.workload or list(WORKLOADS)
    plans = [planned(name) for name in names]
    with SeaweedS3Server() as server:
        rows = measure([with_batches(plan, args.batch) for plan in plans], server, args.steps)
        if args.slope and args.batch:
            doubled = measure([with_batches(plan, 2 * args.batch) for plan in plans], server,
                              args.steps)
            for row, other in zip(rows, doubled, strict=True):
                row["mb_per_sample"] = round(
                    (other["peak_rss_mb"] - row["peak_rss_mb"]) / args.batch, 2)
    for row in rows:
        print(f"{row['workload']:20s} {row['role']:15s} B={row['batch']:<4d} "
              f"peak {row['peak_rss_mb']:7.1f} MB  modelled {row['modelled_mb']:7.1f} MB  "
              f"M {row['memory_mb']}", file=sys.stderr)
    print(json.dumps({"benchmark": "memory_roles", "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
