"""``python -m local instance-epoch``: time an epoch of a workload on this machine, unthrottled,
and print the ``planner plan --instance`` value it stands for.

The planner weighs Lambda against one instance (``--instance NAME:USD_PER_HOUR:SECONDS_PER_EPOCH``)
but ships epoch times only for its own networks. For a model of one's own this times training
iterations back to back (an instance runs them so: no exchange, no CPU cap) with ``--threads``
torch threads at ``--batch``, on random inputs of the workload's shape (forward, the
cross-entropy loss, backward, an SGD step with momentum), for at least ``--window`` seconds
after ``--warmup`` untimed iterations. The epoch is ceil(samples / batch) such iterations. The
number describes THIS machine: an EC2 instance type of other hardware will differ, and the
output says where it was measured.

Exit codes: 0 measured, 2 bad input (named flag; nothing built).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fasdl.profiling.measure import DATASET_SHAPES, random_batch, training_step
from local.lambda_.throttle import available_cores
from planner.model.inputs.profiles import ProfileError, WorkloadProfile, load_workload
from planner.model.instance.options import InstanceError, InstanceOption

Say = Callable[[str], None]


class InstanceInputError(ValueError):
    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")


@dataclass(frozen=True)
class EpochTiming:
    """What was measured, and the --instance value it makes."""

    workload: str
    batch: int
    threads: int
    iterations_timed: int
    window_s: float
    seconds_per_iteration: float
    iterations_per_epoch: int
    seconds_per_epoch: float
    measured_on: str  # this machine's CPU and the thread count
    instance: str  # NAME:USD_PER_HOUR:SECONDS_PER_EPOCH, or with USD_PER_HOUR left to fill in

    def lines(self) -> list[str]:
        return [
            f"{self.workload}: {self.iterations_timed} iterations at B={self.batch} in "
            f"{self.window_s:.2f} s = {self.seconds_per_iteration * 1e3:.2f} ms each; "
            f"{self.iterations_per_epoch} iterations per epoch = {self.seconds_per_epoch:.2f} "
            f"s per epoch",
            f"measured on {self.measured_on}, unthrottled, random inputs; an instance type "
            f"of other hardware will differ",
            f"plan against it: python -m planner plan ... --instance {self.instance}"]


def cpu_name() -> str:
    """This machine's CPU model as /proc/cpuinfo names it (else the platform's)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def shape_of(workload: WorkloadProfile) -> tuple[tuple[int, ...], int]:
    """The input shape and classes: the workload's own, or its shipped dataset's."""
    spec = workload.workload
    if spec.input_shape and spec.classes:
        return tuple(spec.input_shape), spec.classes
    shipped = DATASET_SHAPES.get(spec.dataset.rstrip("/").rsplit("/", 1)[-1])
    if shipped is None:
        raise InstanceInputError("--workload", f"workload {workload.name} names neither an "
                                 f"input_shape and classes nor a shipped dataset "
                                 f"({', '.join(DATASET_SHAPES)})")
    return shipped


def time_epoch(workload: WorkloadProfile, *, batch: int, threads: int, window_s: float,
               warmup: int, name: str, usd_per_hour: float | None) -> EpochTiming:
    """Back-to-back iterations for at least ``window_s`` (see the module docstring)."""
    import torch

    shape, classes = shape_of(workload)
    torch.set_num_threads(threads)
    step = training_step(workload.workload.model, classes, shape)
    inputs, labels = random_batch(torch.Generator().manual_seed(0), batch, shape, classes)
    for _ in range(warmup):
        step(inputs, labels)
    count, began = 0, time.perf_counter()
    while count < 3 or time.perf_counter() - began < window_s:
        step(inputs, labels)
        count += 1
    elapsed = time.perf_counter() - began
    per_iteration = elapsed / count
    iterations = math.ceil(workload.samples / batch)
    epoch_s = round(iterations * per_iteration, 3)
    price = "USD_PER_HOUR" if usd_per_hour is None else f"{usd_per_hour:g}"
    return EpochTiming(workload.name, batch, threads, count, round(elapsed, 3),
                       per_iteration, iterations, epoch_s,
                       f"{cpu_name()} ({threads} torch thread(s) of {available_cores()} "
                       f"cores)", f"{name}:{price}:{epoch_s:g}")


def _checked(args: argparse.Namespace) -> WorkloadProfile:
    """Every option, before torch is loaded; raises :class:`InstanceInputError`."""
    if not 1 <= args.threads <= 1024:
        raise InstanceInputError("--threads", f"must be in [1, 1024], got {args.threads}")
    if not 1 <= args.batch <= 1_000_000:
        raise InstanceInputError("--batch", f"must be in [1, 1000000], got {args.batch}")
    if not 0.1 <= args.window <= 3600:
        raise InstanceInputError("--window", f"must be in [0.1, 3600] s, got {args.window}")
    if not 0 <= args.warmup <= 1000:
        raise InstanceInputError("--warmup", f"must be in [0, 1000], got {args.warmup}")
    try:  # the row's own checks (planner/model/instance/options.py); the epoch comes later
        InstanceOption(name=args.name, seconds_per_epoch=1.0, startup_s=0.0,
                       usd_per_hour=1.0 if args.usd_per_hour is None else args.usd_per_hour)
    except InstanceError as error:
        flag = {"name": "--name", "usd_per_hour": "--usd-per-hour"}[str(error.field)]
        raise InstanceInputError(flag, error.detail) from error
    try:
        workload = load_workload(args.workload)
    except ProfileError as error:
        raise InstanceInputError("--workload", str(error)) from error
    shape_of(workload)
    return workload


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "instance-epoch", help="time an unthrottled epoch here; print the --instance value",
        description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--workload", required=True,
                        help="a workload name (planner/data/workloads) or file (yours)")
    parser.add_argument("--threads", type=int, default=available_cores(),
                        help=f"torch threads (default this machine's cores, "
                             f"{available_cores()})")
    parser.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    parser.add_argument("--window", type=float, default=5.0,
                        help="seconds of timed iterations, at least 3 (default 5)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed iterations (default 3)")
    parser.add_argument("--name", default="this-machine",
                        help="the instance row's name (default this-machine)")
    parser.add_argument("--usd-per-hour", type=float,
                        help="the instance's price, written into the --instance value")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")


def main(args: argparse.Namespace, say: Say) -> int:
    """0 measured, 2 bad input."""
    try:
        workload = _checked(args)
    except InstanceInputError as error:
        print(f"fasdl local instance-epoch: {error}", file=sys.stderr)
        return 2
    timing = time_epoch(workload, batch=args.batch, threads=args.threads,
                        window_s=args.window, warmup=args.warmup, name=args.name,
                        usd_per_hour=args.usd_per_hour)
    if args.json:
        document: dict[str, Any] = {"status": "ok", **asdict(timing)}
        say(json.dumps(document))
    else:
        for line in timing.lines():
            say(line)
    return 0
