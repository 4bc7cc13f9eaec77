"""Shared by bench/prediction.py and bench/patterns.py: plan a configuration, run it with
``local`` under Lambda emulation, and read what the workers measured.

Measured iteration time comes from the workers' EMF records (one ``IterationTime`` value per
iteration, in the invocation logs the emulator keeps). The first ``WARMUP_ITERATIONS`` of
each invocation are dropped: they include the peers' start-up skew (every emulated
invocation is a cold start), which the planner charges to the segment load, not to an
iteration. Epoch time = the plan's iterations per epoch × the mean steady iteration time of
the workers, so predicted and measured epochs count the same iterations.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fasdl.contract.cache import MAX_ECPU_PER_SECOND
from fasdl.contract.plan import Plan
from local.run.run_options import RunOptions
from local.run.runner import run
from planner.commands.cli_inputs import max_deadline_s
from planner.commands.planfile import to_plan
from planner.model.inputs.problem import VIOLATION_TEXT, Problem, Violation
from planner.model.inputs.profiles import PlatformProfile, Prices, WorkloadProfile, load_prices
from planner.model.terms.cost_model import aligned_non_aggregator_batch, evaluate
from planner.search.searches import Choice, choice_from, exact

WARMUP_ITERATIONS = 2
DIGITS_TRAIN_SAMPLES = 1438  # the train split local runs build from scikit-learn's digits
# The smoke size's ``python -m local profile`` (bench/smoke.py): the fewest samples it fits.
# Batches far apart: the cnn's iteration is ~8 ms at B = 16 and 32 alike, and under the
# parallel pass's load such a flat pair once fitted b = 7.4e6, out of the profile's range.
PROFILE_SMOKE = ("--batches", "8", "128", "--sizes-mb", "0.0625", "0.5", "--warmup", "1",
                 "--repeats", "2", "--transfer-repeats", "1")
# A bench measures how far the prediction lands from the run, whatever its profile's fit; the
# profile's summary.json records the quality gates' verdict (planner/fit/gates.py).
ACCEPT_ANY_FIT = ("--accept-failed-fit",)
_WORKER_LOG = re.compile(r"-s(\d{5})-a(\d+)-w(\d{4})-[0-9a-f]{8}\.log$")
Say = Callable[[str], None]


class BenchError(RuntimeError):
    """A configuration that cannot be planned or a run that failed."""


@dataclass(frozen=True)
class Config:
    """One fixed configuration to predict and measure."""

    label: str
    workers: int
    memory_mb: int
    aggregators: int
    batch_aggregator: int
    channel: str = "s3"
    sync: str = "hap"
    model: str = "cnn"
    epochs: int = 1
    chunks: int = 1  # training.exchange_chunks: > 1 runs the pipelined exchange


def problem_for(workload: WorkloadProfile, platform: PlatformProfile, *, epochs: int,
                max_global_batch: int, workers: int | None = None,
                memory_mb: int | None = None, prices: Prices | None = None) -> Problem:
    """A problem with no binding deadline (the cheapest plan), optionally at a fixed W and M:
    the largest deadline a plan's limits take (1e8 s made every plan a contract error). A warm
    cache: these benches measure the steady state over runs of seconds, which a fresh cache's
    minutes of ramp (planner/model/terms/cache_ramp.py) would swamp. No per-slot ceiling (the
    largest a cache accepts): they measure the exchange at this machine's speed, where one key
    serves far more than AWS's 30,000 ECPU/s per slot; bench.cache_scaling measures the ceiling."""
    platform = replace(platform, cache_slot_ecpu_per_s=float(MAX_ECPU_PER_SECOND))
    return Problem(
        workload=workload, platform=platform, prices=prices or load_prices(), epochs=epochs,
        deadline_s=max_deadline_s(), max_global_batch=max_global_batch, timeout_s=900.0,
        memory_min_mb=memory_mb or 128, memory_max_mb=memory_mb or 10240,
        memory_step_mb=1 if memory_mb else 128,
        min_workers=workers or 1, max_workers=workers or 1000, cache_warm=True)


def fixed_choice(problem: Problem, config: Config) -> Choice:
    """The model's prediction for exactly ``config`` (B^n by the alignment rule); ``problem``
    must carry the config's chunk count (:func:`chunked`)."""
    w, m, k, ba = ([value] for value in (config.workers, config.memory_mb, config.aggregators,
                                         config.batch_aggregator))
    bn = aligned_non_aggregator_batch(problem, w, m, k, ba)
    evaluation = evaluate(problem, w, m, k, ba, bn, bsp=config.sync == "bsp")
    violation = Violation(int(evaluation.violation[0]))
    if violation is not Violation.NONE:
        raise BenchError(f"{config.label}: the model rejects it: {VIOLATION_TEXT[violation]}")
    return choice_from(evaluation, 0, problem.exchange_chunks)


def best_choice(problem: Problem, pattern: str) -> Choice:
    choice = exact(problem, pattern).choice
    if choice is None:
        raise BenchError(f"no feasible {pattern} configuration at this W and M")
    return choice


def configuration_fields(choice: Choice) -> dict[str, Any]:
    """The configuration columns every bench row reports."""
    return {"workers": choice.workers, "memory_mb": choice.memory_mb,
            "aggregators": choice.aggregators, "chunks": choice.exchange_chunks,
            "batch_aggregator": choice.batch_aggregator,
            "batch_non_aggregator": choice.batch_non_aggregator, "sync": choice.sync}


def predicted_epoch_s(choice: Choice, plan: Plan) -> float:
    return plan.iterations_per_epoch * choice.breakdown["iteration_s"]


def write_plan(problem: Problem, choice: Choice, path: Path, *, channel: str) -> Plan:
    """The plan file a local run reads: one segment for the whole run."""
    plan = to_plan(problem, choice, search="fixed")
    data = plan.to_dict()
    data["deployment"]["channel"] = channel
    data["training"]["segment_iterations"] = plan.total_iterations
    path.write_text(json.dumps(data, indent=1))
    return Plan.from_dict(data)


def local_workload(workload: WorkloadProfile) -> WorkloadProfile:
    """The profile with the digits train split's sample count (what the local run trains)."""
    return workload.with_workload(samples=DIGITS_TRAIN_SAMPLES)


@dataclass(frozen=True)
class Measurement:
    iteration_s: float  # mean steady iteration time over the workers
    iterations_measured: int  # steady iterations counted, all workers together
    per_worker_s: dict[int, float]
    run_s: float  # the whole local run, wall clock (start-up included)
    report_dir: Path


def run_plan(plan_path: Path, plan: Plan, *, report_dir: Path, emulate: str | None,
             say: Say, timeout_s: float = 1800.0) -> Measurement:
    """Run ``plan`` through the synthesized state machine here; its steady iteration time."""
    options = RunOptions(plan=plan_path, channel=plan.deployment.channel,
                         timeout_s=timeout_s, report_dir=report_dir, threads=None,
                         run_id=f"bench-{report_dir.name}", emulate_lambda=emulate)
    code = run(options, say=say)
    if code != 0:
        raise BenchError(f"the local run of {plan_path} failed (exit {code}); see {report_dir}")
    times = worker_iteration_times(report_dir / "logs")
    steady = {worker: values[WARMUP_ITERATIONS:] for worker, values in times.items()}
    steady = {worker: values for worker, values in steady.items() if values}
    if len(steady) != plan.deployment.workers:
        raise BenchError(f"{report_dir}: steady iteration times for {len(steady)} of "
                         f"{plan.deployment.workers} workers; run more iterations")
    report = json.loads((report_dir / "report.json").read_text())
    per_worker = {worker: statistics.fmean(values) for worker, values in steady.items()}
    return Measurement(iteration_s=statistics.fmean(per_worker.values()),
                       iterations_measured=sum(len(v) for v in steady.values()),
                       per_worker_s=per_worker, run_s=float(report.get("measured_s", 0.0)),
                       report_dir=report_dir)


def worker_iteration_times(log_dir: Path) -> dict[int, list[float]]:
    """Per worker, the ``IterationTime`` EMF values of its first successful invocation."""
    return worker_metric_values(log_dir, "IterationTime")


def worker_metric_values(log_dir: Path, name: str) -> dict[int, list[float]]:
    """Per worker, the EMF values of metric ``name`` of its first invocation that has any."""
    found: dict[int, list[float]] = {}
    for log in sorted(log_dir.glob("*.log")):
        match = _WORKER_LOG.search(log.name)
        if match is None:
            continue
        worker = int(match.group(3))
        values: list[float] = []
        for line in log.read_text(errors="replace").splitlines():
            if f'"{name}"' not in line or not line.startswith("{"):
                continue
            record: dict[str, Any] = json.loads(line)
            found_values: Any = record.get(name)
            values += [float(v) for v in (found_values if isinstance(found_values, list)
                                          else [found_values])]
        if values and worker not in found:
            found[worker] = values
    return found


def scratch(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def relative_error(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured
