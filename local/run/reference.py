"""The single-process reference a run is compared with: one process trains the plan's network
with the plan's recipe (fasdl.training.optimizers, fasdl.training.augment) on the union of the W
workers'
batches, every iteration the rows the workers draw (their partitions and data order), for the
run's iterations, and is evaluated on the test split at each segment's end.

Under bsp with SGD it is the run itself up to float rounding (tests/runtime/test_kreduce.py);
otherwise it shows what K-REDUCE's staleness (hap) or its local optimizer states (AdamW) cost.
``python -m local run --reference`` plots it beside the run; bench/convergence.py measures
its gaps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fasdl.contract.plan import Plan
from fasdl.training.augment import Normalization, normalization_of, training_tensors
from fasdl.training.data import BatchStream, Partition, class_count, plan_partition
from fasdl.training.evaluation import confusion_of
from fasdl.training.losses import build_loss
from fasdl.training.networks import build_seeded_model
from fasdl.training.optimizers import FlatParameters, build_optimizer

Say = Callable[[str], None]


def worker_streams(plan: Plan, train: Partition) -> list[BatchStream]:
    """Each worker's batches, from its partition, as the runtime draws them."""
    streams = []
    for worker in range(plan.deployment.workers):
        start, end = plan_partition(plan, worker)
        streams.append(BatchStream.for_plan(
            plan, worker, Partition(train.x[start:end], train.y[start:end])))
    return streams


def evaluate(model: torch.nn.Module, test: Partition, classes: int, augmentation: str,
             normalization: Normalization | None = None) -> dict[str, float | None]:
    """Accuracy (and, for two classes, Matthews correlation) on the test rows, batched and
    normalised as worker 0 and python -m fasdl.evaluate do it."""
    confusion = confusion_of(model, test.x, test.y, classes, augmentation=augmentation,
                             normalization=normalization)
    return {"accuracy": confusion.accuracy(), "mcc": confusion.mcc()}


def segment_ends(plan: Plan) -> list[int]:
    """The planned segments' last iteration + 1."""
    step, total = plan.training.segment_iterations, plan.total_iterations
    return [min(end, total) for end in range(step, total + step, step)]


def reference_curve(plan: Plan, train: Partition, test: Partition | None,
                    ends: Sequence[int], say: Say | None = None) -> list[dict[str, Any]]:
    """Train to ``ends[-1]`` iterations; one point per end: mean training loss since the
    previous end, and the test metrics there (None without a test split)."""
    t = plan.training
    shape = tuple(int(n) for n in train.x.shape[1:])
    classes = class_count(train.y)
    model = build_seeded_model(plan.workload.model, t.seed, classes, shape)
    optimizer = build_optimizer(FlatParameters(model), plan)
    loss_fn = build_loss(plan.workload)
    streams = worker_streams(plan, train)
    normalization = normalization_of(plan.workload)  # images, normalize: the dataset's
    points: list[dict[str, Any]] = []
    losses: list[float] = []
    began = time.monotonic()
    for iteration in range(max(ends, default=0)):
        # each worker's rows augmented as that worker would, then one union batch
        batches = [training_tensors(*stream.next_batch(), t.augmentation, seed=t.seed,
                                    worker=worker, iteration=iteration,
                                    normalization=normalization)
                   for worker, stream in enumerate(streams)]
        model.train()
        optimizer.zero_grad()
        loss = loss_fn(model(torch.cat([b[0] for b in batches])),
                       torch.cat([b[1] for b in batches]))
        loss.backward()
        optimizer.step(iteration)
        losses.append(float(loss.detach()))
        if iteration + 1 in ends:
            metrics = (evaluate(model, test, classes, t.augmentation, normalization)
                       if test is not None else {"accuracy": None, "mcc": None})
            points.append({"iteration": iteration + 1, "loss_mean": float(np.mean(losses)),
                           **metrics})
            losses = []
            if say is not None:
                say(f"  reference to iteration {iteration + 1}: {_describe(points[-1])} "
                    f"({time.monotonic() - began:.0f} s)")
    return points


def _describe(point: dict[str, Any]) -> str:
    text = f"loss {point['loss_mean']:.4f}"
    if point["accuracy"] is not None:
        text += f", test accuracy {point['accuracy']:.3f}"
    if point["mcc"] is not None:
        text += f", MCC {point['mcc']:.3f}"
    return text


def single_process_reference(plan: Plan, files: dict[str, Path], say: Say
                             ) -> list[dict[str, Any]]:
    """The reference curve of a local run, from its dataset files (``x.npy``, ``y.npy``,
    optionally ``test/x.npy``, ``test/y.npy``), at the plan's segment ends."""
    samples = plan.workload.samples  # the workers' partitions cover the first D rows
    train = Partition(np.load(files["x.npy"], allow_pickle=False)[:samples],
                      np.load(files["y.npy"], allow_pickle=False)[:samples])
    test = (Partition(np.load(files["test/x.npy"], allow_pickle=False),
                      np.load(files["test/y.npy"], allow_pickle=False))
            if "test/x.npy" in files and "test/y.npy" in files else None)
    say(f"training the single-process reference ({plan.total_iterations} iterations on the "
        f"union batch of {plan.global_batch}; --reference)")
    return reference_curve(plan, train, test, segment_ends(plan), say)
