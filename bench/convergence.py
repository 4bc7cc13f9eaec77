"""Convergence: K-REDUCE's final test metric against one process on the union batch.

For each case, one process trains the network with the runtime's optimizer and schedule
(fasdl.training.optimizers: the same recipe, learning rate and iterations) on the union of the W
workers' batches, every iteration the same rows the workers draw, augmented as each worker
augments them (fasdl.training.data.BatchStream and fasdl.training.augment: the runtime's
partitions, data order
and draws). Then W K-REDUCE workers (threads, the in-memory channel) train the same budget
under bsp and hap for K in {1, 2, W}, and hap with the paper's merge (``hap-paper``, K < W:
a non-aggregator trains on from the stale merged model as it is, fasdl.exchange.kreduce). The
gap is the reference's metric minus K-REDUCE's, in points (0.5 = half a percentage point;
accuracy, or Matthews correlation ×100 for the text case). Goals: bsp within 0.5 points, hap
within 1.5 (issue 13); the paper's merge is reported beside them, without a goal.

Cases:

* ``digits``: the shipped digits set (8×8 grey) and the registry ``cnn``, the ``make run`` job;
* ``rgb32``: a CIFAR-shaped set (3×32×32 uint8) made from the digits, each scaled ×4 with a
  random foreground and background colour and pixel noise per image. CIFAR-10 itself cannot
  be downloaded here; this keeps CIFAR's input shape, channels and a harder input
  distribution, not CIFAR's difficulty.

* ``rgb32-cosine``: rgb32 with the CIFAR workloads' schedule (5 % warm-up, then cosine decay)
  but not their augmentation: a flipped digit is another digit (measured: with flips and crops
  the reference fell from 0.93 to 0.89 and hap's gaps grew to 2.5-4.7 points);
* ``digits-batch4x``: digits, but the reference is one process at the batch the learning rate
  was tuned at (16, lr 0.05) and K-REDUCE runs W = 4 at 4× that global batch with the rate the
  plan scales it to (planner.model.inputs.recipe, linear: 0.2, Goyal et al.'s warm-up from 0.05 over
  5 epochs), the same epochs, so a quarter of the iterations;
* ``text``: the generated acceptability set (fasdl.datasets textset, imported at 16 tokens)
  and ``bert-mini`` with the BERT workloads' recipe (AdamW, linear warm-up and decay); its
  metric is the dev split's Matthews correlation, CoLA's.

The CNNs have no batch norm or dropout: with SGD, bsp is then exactly large-batch SGD
(tests/runtime/test_kreduce.py), so its gap measures the runtime, and hap's the one-iteration
staleness. AdamW is not linear in the gradient, so for ``text`` even bsp (local AdamW plus
model averaging) is a different algorithm from the union-batch reference.

    python -m bench.convergence [--case digits] [--epochs N] [--seeds N]
        [--exchange-dtype bfloat16] [--run hap-K1 ...]

Prints one JSON object as its last line. ``--smoke`` (or FASDL_BENCH_SMOKE=1, bench/smoke.py):
the digits case, one epoch, the reference and K-REDUCE's bsp at K = W and hap at K = 1.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.smoke import parse_args
from fasdl.contract.plan import EXCHANGE_DTYPES, Deployment, Plan, Training, Workload
from fasdl.datasets.cola import import_cola
from fasdl.datasets.digits import build_digits
from fasdl.datasets.textset import write_textset
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.training.augment import Normalization, normalization_of, training_tensors
from fasdl.training.data import (
    BatchStream,
    LocalFiles,
    Partition,
    class_count,
    load_partition,
)
from fasdl.training.networks import build_seeded_model
from local.run.reference import evaluate, reference_curve, worker_streams
from planner.model.inputs.recipe import Recipe

GOALS = {"bsp": 0.5, "hap": 1.5}  # points
SYNCS = ("bsp", "hap", "hap-paper")  # hap-paper: the paper's merge, reported without a goal
# the plan fields the learning-rate scaling sets
# (planner.model.inputs.recipe.Recipe.training_fields)
SCALING_FIELDS = ("learning_rate", "lr_scaling", "base_learning_rate", "base_batch",
                  "warmup_iterations", "warmup_start_learning_rate")
TEXT_LENGTH = 16  # tokens, as bert-mini-textset imports it


@dataclass(frozen=True)
class Case:
    """One workload of the benchmark: its data, network and training budget."""

    name: str
    model: str
    epochs: int
    workers: int = 4
    batch: int = 16
    learning_rate: float = 0.05
    momentum: float = 0.9
    # plan training fields beyond these (fasdl.contract.plan.Training); warmup as a share of the run
    recipe: tuple[tuple[str, Any], ...] = ()
    warmup_fraction: float = 0.0
    metric: str = "accuracy"  # or "mcc" (two classes)
    seed: int = 0  # the plan's training.seed: initial weights, data order, augmentation draws
    # set: the rate was tuned at base_workers × batch, where the reference trains; the
    # K-REDUCE runs get the rate the plan scales to their global batch (linear)
    base_workers: int | None = None
    # set: only the first rows of the training split (tests: the whole path, a quarter of it)
    train_rows: int | None = None


COSINE = (("lr_schedule", "cosine"),)
BERT_RECIPE = (("optimizer", "adamw"), ("lr_schedule", "linear"), ("weight_decay", 0.01))
# rgb32 at 20 epochs was still in its noisy phase (the bsp runs, equal up to float rounding,
# spread 9 points); at 60 they agree within 0.84
CASES = {"digits": Case("digits", "cnn", epochs=40), "rgb32": Case("rgb32", "cnn", epochs=60),
         "rgb32-cosine": Case("rgb32-cosine", "cnn", epochs=60, recipe=COSINE,
                              warmup_fraction=0.05),
         "digits-batch4x": Case("digits-batch4x", "cnn", epochs=40, base_workers=1),
         "text": Case("text", "bert-mini", epochs=8, workers=2, batch=32, learning_rate=3e-4,
                      recipe=BERT_RECIPE, warmup_fraction=0.1, metric="mcc")}


def rgb32(x: np.ndarray, seed: int) -> np.ndarray:
    """Digits N×1×8×8 → N×3×32×32 uint8: scaled ×4, coloured per image, with noise."""
    rng = np.random.default_rng(seed)
    ink = np.kron(x[:, 0].astype(np.float64) / 255.0, np.ones((4, 4)))[:, None]
    foreground = rng.uniform(0.55, 1.0, (len(x), 3, 1, 1))  # always lighter than the paper
    background = rng.uniform(0.0, 0.45, (len(x), 3, 1, 1))
    image = background + (foreground - background) * ink
    image += rng.normal(0.0, 0.08, image.shape)
    return np.asarray(np.clip(np.rint(image * 255.0), 0, 255), dtype=np.uint8)


def load_case(case: Case, folder: Path) -> tuple[Partition, Partition]:
    """(train, test) of the case; ``case.train_rows``: the first rows of train only."""
    train, test = _load_splits(case, folder)
    if case.train_rows is not None:
        train = Partition(train.x[:case.train_rows], train.y[:case.train_rows])
    return train, test


def _load_splits(case: Case, folder: Path) -> tuple[Partition, Partition]:
    if case.metric == "mcc":
        write_textset(folder / "tsv", seed=0)
        rows = import_cola(folder / "tsv", folder / "data", max_length=TEXT_LENGTH)
        files = LocalFiles(folder / "data")
        return (load_partition(files, "train", 0, rows["train"]),
                load_partition(files, "test", 0, rows["test"]))
    build_digits(folder, seed=0)
    files = LocalFiles(folder)
    train = load_partition(files, "train", 0, 1438)
    test = load_partition(files, "test", 0, 359)
    if case.name.startswith("rgb32"):
        train, test = Partition(rgb32(train.x, 1), train.y), Partition(rgb32(test.x, 2), test.y)
    return train, test


def make_plan(case: Case, train: Partition, aggregators: int, sync: str,
              workers: int | None = None) -> Plan:
    """The plan of one run: ``sync`` bsp, hap or hap-paper (hap with the paper's merge), on
    ``workers`` (default the case's); a case with a base batch scales the rate to the run's."""
    workers = workers or case.workers
    merge = "paper" if sync == "hap-paper" else "reapply"
    mode = "hap" if merge == "paper" else sync
    plan = _plan(case, train, aggregators, mode, workers, {})
    fields: dict[str, Any] = {
        "warmup_iterations": round(case.warmup_fraction * plan.total_iterations),
        "hap_merge": merge}
    if case.base_workers is not None and workers != case.base_workers:
        recipe = Recipe(learning_rate=case.learning_rate,
                        base_batch=case.base_workers * case.batch,
                        warmup_fraction=case.warmup_fraction)
        scaled = recipe.training_fields(plan.global_batch, plan.iterations_per_epoch,
                                        plan.total_iterations)
        fields.update({name: scaled[name] for name in SCALING_FIELDS if name in scaled})
    return _plan(case, train, aggregators, mode, workers, fields)


def _plan(case: Case, train: Partition, aggregators: int, sync: str, workers: int,
          fields: dict[str, Any]) -> Plan:
    training = {"learning_rate": case.learning_rate, **dict(case.recipe), **fields}
    return Plan(
        workload=Workload(name=case.name, model=case.model, dataset=f"datasets/{case.name}",
                          samples=len(train.y), dataset_mb=1.0, model_mb=1.0),
        deployment=Deployment(channel="s3", arch="x86_64", memory_mb=1024, workers=workers),
        training=Training(aggregators=aggregators, batch_aggregator=case.batch,
                          batch_non_aggregator=case.batch, max_global_batch=4096,
                          epochs=case.epochs, segment_iterations=10**6, sync=sync,
                          momentum=case.momentum, seed=case.seed, **training))


def score(model: torch.nn.Module, test: Partition, case: Case, augmentation: str,
          classes: int, normalization: Normalization | None = None) -> float:
    """The case's metric on the test split: accuracy, or Matthews correlation."""
    metrics = evaluate(model, test, classes, augmentation, normalization)
    value = metrics[case.metric]
    return 0.0 if value is None else value  # one predicted class: no correlation


def network(case: Case, plan: Plan, train: Partition) -> torch.nn.Module:
    shape = tuple(int(n) for n in train.x.shape[1:])
    return build_seeded_model(case.model, plan.training.seed, class_count(train.y), shape)


def reference(case: Case, plan: Plan, train: Partition, test: Partition) -> float:
    """One process, the union of the workers' batches, the runtime's recipe
    (local.run.reference)."""
    final = reference_curve(plan, train, test, [plan.total_iterations])[-1]
    value = final[case.metric]
    return 0.0 if value is None else float(value)


def kreduce(case: Case, plan: Plan, train: Partition, test: Partition) -> float:
    """W K-REDUCE workers as threads through the in-memory channel; worker 0's metric."""
    workers = case_workers(case, plan, train, epoch=1)
    try:
        train_workers(plan, workers, worker_streams(plan, train), range(plan.total_iterations))
    finally:
        for worker in workers:
            worker.close()
    # an aggregator: it holds the merged model
    return score(workers[0].model, test, case, plan.training.augmentation,
                 class_count(train.y), normalization_of(plan.workload))


def case_workers(case: Case, plan: Plan, train: Partition, epoch: int) -> list[KReduceWorker]:
    """The plan's W workers of the case's seeded network, on one in-memory channel."""
    model = network(case, plan, train)
    channel = MemoryChannel()
    return [KReduceWorker(plan, w, channel, copy.deepcopy(model), case.name, epoch,
                          wait_timeout_s=120.0) for w in range(plan.deployment.workers)]


def train_workers(plan: Plan, workers: list[KReduceWorker], streams: list[BatchStream],
                  iterations: range) -> None:
    """Every worker's ``iterations``, one thread each, drawing from its stream (images
    normalised as the dataset says); the first error is raised once all have stopped."""
    normalization = normalization_of(plan.workload)
    errors: list[BaseException] = []

    def train_worker(worker: KReduceWorker) -> None:
        try:
            for iteration in iterations:
                batch = training_tensors(*streams[worker.worker_id].next_batch(),
                                         plan.training.augmentation, seed=plan.training.seed,
                                         worker=worker.worker_id, iteration=iteration,
                                         normalization=normalization)
                worker.step(*batch, iteration)
        except BaseException as error:  # re-raised in the caller
            errors.append(error)

    threads = [threading.Thread(target=train_worker, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def run_names(case: Case) -> list[str]:
    """The K-REDUCE runs of a case, as results name them: bsp and hap for K in {1, 2, W},
    hap-paper for K in {1, 2} below W (at K = W there is no non-aggregator to merge)."""
    every = sorted({1, 2, case.workers})
    return [f"{sync}-K{k}" for sync in SYNCS for k in every
            if sync != "hap-paper" or k < case.workers]


def run_case(case: Case, folder: Path, say: Any, only: set[str] | None = None
             ) -> dict[str, Any]:
    """The reference and the case's runs (those named in ``only``, or all of them)."""
    train, test = load_case(case, folder)
    base = make_plan(case, train, 1, "bsp", workers=case.base_workers)
    started = time.monotonic()
    ref = reference(case, base, train, test)
    say(f"{case.name}: reference (one process, union batch {base.global_batch}, "
        f"{base.total_iterations} iterations) {ref:.4f} in {time.monotonic() - started:.0f} s")
    runs: dict[str, Any] = {}
    for name in run_names(case):
        if only is not None and name not in only:
            continue
        sync, k = name.rsplit("-K", 1)
        started = time.monotonic()
        plan = make_plan(case, train, int(k), sync)
        got = kreduce(case, plan, train, test)
        gap = round(100.0 * (ref - got), 2)
        runs[name] = {case.metric: round(got, 4), "gap_points": gap}
        say(f"{case.name}: {sync} K={k}: {got:.4f} (gap {gap:+.2f} points) in "
            f"{time.monotonic() - started:.0f} s")
    run_plan = make_plan(case, train, 1, "bsp")
    return {"metric": case.metric, "reference": round(ref, 4), "workers": case.workers,
            "global_batch": run_plan.global_batch, "iterations": run_plan.total_iterations,
            "learning_rate": run_plan.training.learning_rate,
            "reference_global_batch": base.global_batch,
            "reference_iterations": base.total_iterations, "runs": runs}


def over_seeds(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """One case's results over several seeds: the mean reference and mean run metrics, and
    the gaps between those means (one seed's gap is mostly noise on a small test split)."""
    if len(per_seed) == 1:
        return per_seed[0]
    metric = per_seed[0]["metric"]
    reference = float(np.mean([result["reference"] for result in per_seed]))
    runs = {}
    for name in per_seed[0]["runs"]:
        value = float(np.mean([result["runs"][name][metric] for result in per_seed]))
        runs[name] = {metric: round(value, 4),
                      "gap_points": round(100.0 * (reference - value), 2)}
    return {**per_seed[0], "reference": round(reference, 4), "runs": runs,
            "seeds": len(per_seed), "per_seed": per_seed}


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The worst gap per sync over the runs made (None where none was) against the goals
    (hap-paper has none: it is reported beside hap)."""
    worst = {sync: max((run["gap_points"] for case in results.values()
                        for name, run in case["runs"].items()
                        if name.rsplit("-K", 1)[0] == sync), default=None)
             for sync in SYNCS}
    met = all(gap is None or gap <= goal
              for gap, goal in ((worst[sync], goal) for sync, goal in GOALS.items()))
    return {"benchmark": "convergence", "cases": results, "max_gap_points": worst,
            "goal_points": GOALS, "goals_met": met}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.convergence",
                                     description=__doc__.split("\n", 1)[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--epochs", type=int, help="override every case's epochs (>= 1)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="seeds per case (1-20), gaps taken between the means")
    parser.add_argument("--exchange-dtype", choices=EXCHANGE_DTYPES, default="float32",
                        help="what the K-REDUCE runs upload (bfloat16: differences with error "
                             "feedback, fasdl.exchange.codec); the reference is unchanged")
    parser.add_argument("--run", action="append", metavar="SYNC-KN",
                        help="only these K-REDUCE runs (e.g. hap-K1; repeatable; default all: "
                             "bsp and hap for K in {1, 2, W}, hap-paper for K < W)")
    args = parse_args(parser, argv, case=["digits"], epochs=1, run=["bsp-K4", "hap-K1"])
    names = args.case or sorted(CASES)
    unknown = sorted(set(args.run or ()) - {run for name in names
                                             for run in run_names(CASES[name])})
    if unknown:
        allowed = "; ".join(f"{name}: {', '.join(run_names(CASES[name]))}" for name in names)
        parser.error(f"--run {unknown[0]} is no run of the chosen cases ({allowed})")
    if args.epochs is not None and args.epochs < 1:
        parser.error(f"--epochs must be >= 1, got {args.epochs}")
    if not 1 <= args.seeds <= 20:
        parser.error(f"--seeds must be in [1, 20], got {args.seeds}")
    torch.set_num_threads(1)  # W worker threads share the cores
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            case = CASES[name]
            if args.epochs is not None:
                case = dataclasses.replace(case, epochs=args.epochs)
            case = dataclasses.replace(
                case, recipe=(*case.recipe, ("exchange_dtype", args.exchange_dtype)))
            results[name] = over_seeds([
                run_case(dataclasses.replace(case, seed=seed), Path(folder) / f"{name}-{seed}",
                         lambda text: print(text, file=sys.stderr, flush=True),
                         set(args.run) if args.run else None)
                for seed in range(args.seeds)])
    print(json.dumps({**summary(results), "exchange_dtype": args.exchange_dtype}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
