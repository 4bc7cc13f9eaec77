"""Human-readable output of the planner: one choice, a comparison table, the instance rows
and their verdict, the frontier plot."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from planner.commands.cli_inputs import Instances
from planner.commands.verdict import Option, instance_lines, verdict
from planner.model.confidence import assess
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import lambda_vcpus
from planner.model.instance.options import InstanceRun
from planner.model.terms.channels import channel_costs
from planner.model.terms.cost_model import busy_s
from planner.model.terms.exchange_time import cpu_bounds, non_aggregator_times
from planner.search.searches import PATTERNS, Choice, SearchResult, frontier

PATTERN_TITLES = {"kreduce": "K-REDUCE", "kreduce-pipelined": "K-REDUCE pipelined",
                  "scatterreduce": "ScatterReduce",
                  "allreduce": "AllReduce", "standalone": "standalone"}
METHOD_TITLES = {"lambda-dnn": "λDNN-style provisioning", "standalone": "standalone (W=1)",
                 "exact, any W": "optimum, any W (exact)"}


def describe_choice(problem: Problem, result: SearchResult) -> str:
    choice = result.choice
    if choice is None:
        return f"infeasible: {result.reason}"
    b = choice.breakdown
    chunked = replace(problem, exchange_chunks=choice.exchange_chunks)  # the choice's C
    title = PATTERN_TITLES.get(choice.pattern, choice.pattern)
    confidence = assess(problem, choice)
    lines = [
        *confidence.headline(),  # provisional inputs: said first
        f"Plan for {problem.workload.name}: {title} on {problem.channel}, {problem.arch} "
        f"({result.method} search, {result.evaluated:,} configurations in "
        f"{result.elapsed_s * 1000:.0f} ms)",
        f"  workers W={choice.workers}  memory M={choice.memory_mb} MB  aggregators "
        f"K={choice.aggregators}  batch B^a={choice.batch_aggregator} "
        f"B^n={choice.batch_non_aggregator}  sync {choice.sync}"
        + (f"  chunks C={choice.exchange_chunks}" if choice.exchange_chunks > 1 else "")
        + ("  uploads bfloat16" if problem.exchange_dtype == "bfloat16" else ""),
        f"  global batch {choice.global_batch} (cap {problem.max_global_batch}), "
        f"{choice.iterations_per_epoch:.1f} iterations/epoch x {problem.epochs} epochs, "
        f"{choice.segments} segment(s) of <= {choice.segment_iterations} iterations",
        f"  predicted time {choice.time_s:,.0f} s (deadline {problem.deadline_s:,.0f} s), "
        f"cost ${choice.cost_usd:.4f}",
        confidence.range_line(),
        f"    cost: Lambda compute ${b['lambda_compute_usd']:.4f}, requests + Step Functions "
        f"${b['requests_usd']:.4f}, exchange ${b['exchange_usd']:.4f}, checkpoints + data "
        f"${b['checkpoint_and_data_usd']:.4f}, storage ${b['storage_usd']:.4f}"
        + channel_costs(problem).cost_line_extra(b),
        *_iteration_lines(chunked, choice),
        *_cpu_lines(chunked, choice),
        f"    per segment: load {b['load_s']:.1f} s, checkpoint {b['checkpoint_s']:.1f} s",
        *channel_costs(problem).report_lines(problem, b),
    ]
    return "\n".join(lines)


def _iteration_lines(problem: Problem, choice: Choice) -> list[str]:
    """Each role's train, upload and download per iteration: at K = 1 the aggregator moves
    nothing (its shard stays local) and the non-aggregators' transfers set the iteration."""
    b = choice.breakdown
    head = f"    per iteration {b['iteration_s']:.3f} s:"
    if choice.workers == 1:
        return [f"{head} train {b['train_aggregator_s']:.3f} s, no exchange (W = 1)"]
    lines = [head, f"      aggregator      train {b['train_aggregator_s']:.3f} s (B^a), upload "
                   f"{b['upload_s']:.3f} s, aggregate {b['aggregate_s']:.3f} s, download "
                   f"{b['download_s']:.3f} s"]
    if choice.aggregators >= choice.workers:
        return [*lines, "      non-aggregator  none (K = W)"]
    upload, download = non_aggregator_times(problem, np.array([choice.memory_mb]),
                                            np.array([choice.aggregators]))
    floors = channel_costs(problem).slot_floors(
        problem, np.array([choice.workers]), np.array([choice.aggregators]))
    floor = float(np.asarray(floors.download).flat[0])
    hot = (f" (at least {floor:.3f} s at the hot key's slot rate)"
           if floor > float(download[0]) else "")
    return [*lines, f"      non-aggregator  train {b['train_non_aggregator_s']:.3f} s (B^n), "
                    f"upload {float(upload[0]):.3f} s, download {float(download[0]):.3f} s{hot}"]


def _cpu_lines(problem: Problem, choice: Choice) -> list[str]:
    """Each role's CPU per iteration at M's share (planner/model/terms/client_cpu.py), where the
    profiles measured it, and whether it, not the transfers, sets the iteration."""
    wl, b = problem.workload, choice.breakdown
    if not (problem.platform.cpu_profiled or wl.cpu_profiled):
        return []  # profiles without CPU figures (the shipped ones)
    memory, k = np.array([choice.memory_mb]), np.array([choice.aggregators])
    busy = (busy_s(wl, memory, choice.batch_aggregator, b["train_aggregator_s"]),
            busy_s(wl, memory, choice.batch_non_aggregator, b["train_non_aggregator_s"]))
    bound_a, bound_n = (float(x[0]) for x in cpu_bounds(
        problem, np.array([choice.workers]), memory, k, busy))
    roles = f"{'aggregator' if choice.workers > 1 else 'the worker'} {bound_a:.3f} s"
    if choice.aggregators < choice.workers:
        roles += f", non-aggregator {bound_n:.3f} s"
    sets = ("  (sets the iteration)"
            if max(bound_a, bound_n) >= b["iteration_s"] * (1 - 1e-9) else "")
    return [f"      CPU at {float(lambda_vcpus(choice.memory_mb)):.2f} vCPU: {roles}{sets}"]


def result_title(result: SearchResult) -> str:
    return METHOD_TITLES.get(result.method) or (
        f"{PATTERN_TITLES.get(result.pattern, result.pattern)} ({result.method})")


def lambda_option(problem: Problem, results: Sequence[SearchResult]) -> Option | None:
    """The cheapest Lambda configuration among ``results``, as the verdict weighs it, with its
    likely range (the plan's confidence)."""
    feasible = [(r, r.choice) for r in results if r.choice is not None]
    if not feasible:
        return None
    result, choice = min(feasible, key=lambda pair: pair[1].cost_usd)
    detail = f"{result_title(result)}, {choice.workers} x {choice.memory_mb:,} MB"
    confidence = assess(problem, choice)
    return Option("lambda", f"Lambda ({detail})", choice.time_s, choice.cost_usd, True,
                  detail=detail, time_range=confidence.time_range,
                  cost_range=confidence.cost_range)


def instance_report(problem: Problem, results: Sequence[SearchResult], instances: Instances,
                    reference: str) -> tuple[list[str], dict[str, Any]]:
    """The instance table and the verdict against the Lambda ``results``, as text lines and
    as the JSON fields ``instances``, ``instance_notes`` and ``verdict``. ``reference`` names
    the first result (its cost is the table's 100 %)."""
    first = results[0].choice if results else None
    lines = instance_lines(instances.runs, instances.notes, instances.billing,
                           first.cost_usd if first else None, reference)
    reason = next((r.reason for r in reversed(results) if r.reason), "")  # the broadest
    judged = verdict(lambda_option(problem, results), instances.runs, problem.deadline_s, reason)
    return [*lines, judged["text"]], {
        "instances": [run.to_dict() for run in instances.runs],
        "instance_notes": list(instances.notes), "verdict": judged}


def choice_table(problem: Problem, results: list[SearchResult]) -> str:
    reference = results[0].choice
    header = (f"{'strategy':<26} {'W':>4} {'M (MB)':>7} {'K':>4} {'B^a':>5} {'B^n':>5} "
              f"{'time (s)':>10} {'cost ($)':>10} {'vs K-REDUCE':>12}")
    lines = [f"{problem.workload.name}: deadline {problem.deadline_s:g} s, B^g_max "
             f"{problem.max_global_batch}, {problem.epochs} epochs, {problem.channel}, "
             f"{problem.arch}", header, "-" * len(header)]
    for result in results:
        title = result_title(result)
        choice = result.choice
        if choice is None:
            lines.append(f"{title:<26} no fit: {result.reason}")
            continue
        ratio = (f"{choice.cost_usd / reference.cost_usd - 1:+.1%}"
                 if reference is not None else "n/a")
        lines.append(
            f"{title:<26} {choice.workers:>4} {choice.memory_mb:>7} {choice.aggregators:>4} "
            f"{choice.batch_aggregator:>5} {choice.batch_non_aggregator:>5} "
            f"{choice.time_s:>10,.0f} {choice.cost_usd:>10.4f} {ratio:>12}")
    return "\n".join(lines)


def render_frontier(problem: Problem, png: str, *, points: int = 40,
                    bn_rule: str = "search",
                    instances: Sequence[InstanceRun] = ()) -> dict[str, Any]:
    """Minimum cost vs deadline for each pattern, and each instance as one point (its time,
    its cost: it meets every deadline from its time on); writes a PNG, returns the curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    deadlines = np.geomspace(problem.deadline_s / 10.0, problem.deadline_s * 3.0, points)
    curves: dict[str, Any] = {}
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for pattern in PATTERNS:
        costs = frontier(problem, pattern, deadlines, bn_rule)
        curves[pattern] = {"deadline_s": deadlines.round(3).tolist(),
                           "cost_usd": [None if np.isnan(c) else round(float(c), 6)
                                        for c in costs]}
        axes.plot(deadlines, costs, marker=".", label=PATTERN_TITLES[pattern])
    _instance_points(axes, instances)
    axes.axvline(problem.deadline_s, color="grey", linestyle=":", label="requested deadline")
    axes.set_xscale("log")
    axes.set_xlabel("deadline (s)")
    axes.set_ylabel("minimum predicted cost (USD)")
    scope = f", W >= {problem.min_workers}" if problem.min_workers > 1 else ""
    axes.set_title(f"{problem.workload.name} on {problem.channel}/{problem.arch}, "
                   f"B^g_max {problem.max_global_batch}, {problem.epochs} epochs{scope}")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    plt.close(figure)
    return curves


def frontier_summary(curves: dict[str, Any], runs: Sequence[InstanceRun]) -> str:
    """What ``frontier`` wrote, in one line: feasible deadlines per pattern, each instance."""
    feasible = {name: sum(c is not None for c in curve["cost_usd"])
                for name, curve in curves.items()}
    return ("minimum cost vs deadline for "
            + ", ".join(f"{name} ({count} feasible deadlines)"
                        for name, count in feasible.items())
            + "".join(f"; one {p['name']}: {p['time_s']:,.0f} s, ${p['cost_usd']:.4f}"
                      for p in instance_points(runs)))


def instance_points(runs: Sequence[InstanceRun]) -> list[dict[str, Any]]:
    """What the frontier plots for the instances: one (time, cost) point each."""
    return [{"name": run.option.name, "time_s": run.time_s, "cost_usd": run.cost_usd,
             "exact": run.option.exact}
            for run in runs]


def _instance_points(axes: Any, runs: Sequence[InstanceRun]) -> None:
    # black markers: the pattern curves own the colour cycle
    for point, marker in zip(instance_points(runs), itertools.cycle("*PXDs^"), strict=False):
        axes.scatter([point["time_s"]], [point["cost_usd"]], marker=marker, s=110, zorder=3,
                     color="black", label=f"one {point['name']}"
                     + ("" if point["exact"] else " (not measured on it)"))
        axes.annotate(point["name"], (point["time_s"], point["cost_usd"]),
                      textcoords="offset points", xytext=(6, 4), fontsize=8)
