"""Planner search benchmark: exact vs two-stage vs the exhaustive reference, per paper workload,
and the exact search on ImageNet-size global batches.

Paper section: for each workload of FasDL Table IV (with the epochs tests/planner/test_paper.py
derives), the time of each search (exact and two-stage: median of repeats; exhaustive: once),
whether exact equals exhaustive, exact's speedup over exhaustive, and two-stage's cost gap to
exact. B^n by --bn-rule (default align: the exhaustive reference walks the B^n search's extra
dimension one configuration at a time, ~10x longer). Goals: exact == exhaustive everywhere,
speedup >= 100x, exact < 0.5 s per workload.

Large section: B^g_max 8,192, 32,768 and 65,536 with W up to 1,000, each search in a child
process (python -m bench.planner_search --one ...) that reports its wall time and its peak RSS
(VmHWM, Python and numpy included), under both B^n rules. Goals: <= 2 s and <= 500 MB each.
The last printed line is one JSON object.

    .venv/bin/python -m bench.planner_search [--channel s3|valkey] [--repeats N] [--large-only]
        [--smoke]

``--smoke`` (or FASDL_BENCH_SMOKE=1, bench/smoke.py): one paper workload at B^g_max 64 (the
exhaustive reference over the full Table IV problems takes minutes), distributed only, one
repeat; one large search (B^g_max 8,192, align) in its child process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from bench.smoke import parse_args
from fasdl.profiling.measure import peak_rss_mb
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import load_platform, load_prices, load_workload
from planner.search.heuristic import two_stage
from planner.search.searches import SearchResult, exact, exhaustive

WORKLOADS = {  # name: (deadline s, B^g_max, epochs)
    "bert-base-cola": (2500.0, 640, 6),
    "resnet50-cifar10": (8000.0, 1024, 19),
    "mobilenet-cifar10": (4000.0, 512, 21),
    "squeezenet-cifar10": (3000.0, 384, 20),
}


# name: (workload, samples and MB of its dataset or None for the shipped ones, deadline s, epochs)
# The ImageNet-1k rows keep resnet50-cifar10's fitted coefficients (torchvision's ImageNet
# layout) with ImageNet's 1,281,167 samples (~140 GB): a search-scale problem, not a
# measured workload. Deadlines leave W in the tens to hundreds.
LARGE = {
    "resnet50-cifar10": ("resnet50-cifar10", None, 1_500.0, 19),
    "resnet50-imagenet1k": ("resnet50-cifar10", (1_281_167, 140_000.0), 10_000.0, 10),
    "mobilenet-imagenet1k": ("mobilenet-cifar10", (1_281_167, 140_000.0), 3_000.0, 10),
}
LARGE_CAPS = (8192, 32768, 65536)
# The smoke size: a paper workload whose exhaustive grid is ~900 configurations, not ~10^5,
# and one large search (name, cap, B^n rule)
SMOKE_WORKLOADS = {"squeezenet-cifar10": (3000.0, 64, 20)}
SMOKE_LARGE = (("resnet50-cifar10", 8192, "align"),)
GOALS_LARGE = {"seconds": 2.0, "peak_rss_mb": 500.0}


def large_problem(name: str, cap: int, channel: str) -> Problem:
    workload_name, dataset, deadline, epochs = LARGE[name]
    workload = load_workload(workload_name)
    if dataset is not None:
        workload = workload.with_workload(name=name, samples=dataset[0],
                                          dataset_mb=dataset[1])
    return Problem(workload=workload, platform=load_platform(channel), prices=load_prices(),
                   epochs=epochs, deadline_s=deadline, max_global_batch=cap)


def one_search(name: str, cap: int, channel: str, rule: str) -> dict[str, Any]:
    """Run in the child: one exact search, its wall time and this process's peak RSS."""
    problem = large_problem(name, cap, channel)
    started = time.perf_counter()
    result = exact(problem, bn_rule=rule)
    seconds = time.perf_counter() - started
    choice = result.choice
    return {"workload": name, "max_global_batch": cap, "bn_rule": rule,
            "seconds": round(seconds, 3), "evaluated": result.evaluated,
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "choice": None if choice is None else {
                "workers": choice.workers, "memory_mb": choice.memory_mb,
                "aggregators": choice.aggregators, "batch_aggregator": choice.batch_aggregator,
                "batch_non_aggregator": choice.batch_non_aggregator,
                "global_batch": choice.global_batch, "time_s": round(choice.time_s, 1),
                "cost_usd": round(choice.cost_usd, 6)}}


def child_search(name: str, cap: int, channel: str, rule: str) -> dict[str, Any]:
    """One search in a fresh process, so its peak RSS is its own."""
    completed = subprocess.run(
        [sys.executable, "-m", "bench.planner_search", "--one", name, str(cap), channel, rule],
        check=True, capture_output=True, text=True)
    row: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return row


def large_searches() -> list[tuple[str, int, str]]:
    """Every large problem at every cap under both B^n rules."""
    return [(name, cap, rule) for name in LARGE for cap in LARGE_CAPS
            for rule in ("search", "align")]


def large_section(channel: str, searches: Sequence[tuple[str, int, str]]
                  ) -> list[dict[str, Any]]:
    rows = []
    print(f"{'large problem':<22} {'B^g_max':>7} {'B^n':>6} {'exact s':>8} {'peak MB':>8} "
          f"{'W':>4} {'M':>6} {'K':>4} {'B^a':>5} {'B^n':>5} {'cost $':>9}", flush=True)
    for name, cap, rule in searches:
        row = child_search(name, cap, channel, rule)
        rows.append(row)
        c = row["choice"] or {}
        print(f"{name:<22} {cap:>7} {rule:>6} {row['seconds']:>8.2f} "
              f"{row['peak_rss_mb']:>8.0f} {c.get('workers', '-'):>4} "
              f"{c.get('memory_mb', '-'):>6} {c.get('aggregators', '-'):>4} "
              f"{c.get('batch_aggregator', '-'):>5} "
              f"{c.get('batch_non_aggregator', '-'):>5} "
              f"{c.get('cost_usd', float('nan')):>9.4f}", flush=True)
    return rows


def timed(search: Callable[[], SearchResult], repeats: int) -> tuple[SearchResult, float]:
    durations = []
    result = search()
    for _ in range(repeats):
        started = time.perf_counter()
        result = search()
        durations.append(time.perf_counter() - started)
    return result, statistics.median(durations)


def same(a: SearchResult, b: SearchResult) -> bool:
    if a.choice is None or b.choice is None:
        return a.choice is None and b.choice is None
    return a.choice.key()[2:] == b.choice.key()[2:] or abs(
        a.choice.cost_usd - b.choice.cost_usd) <= 1e-12 * b.choice.cost_usd


def paper_row(name: str, spec: tuple[float, int, int], scope: int, channel: str, rule: str,
              repeats: int) -> dict[str, Any]:
    deadline, cap, epochs = spec
    problem = Problem(workload=load_workload(name), platform=load_platform(channel),
                      prices=load_prices(), epochs=epochs, deadline_s=deadline,
                      max_global_batch=cap, min_workers=scope)
    best, exact_s = timed(partial(exact, problem, bn_rule=rule), repeats)
    heuristic, two_stage_s = timed(partial(two_stage, problem), repeats)
    started = time.perf_counter()
    reference = exhaustive(problem, bn_rule=rule)
    exhaustive_s = time.perf_counter() - started
    gap = (heuristic.choice.cost_usd / best.choice.cost_usd - 1.0
           if heuristic.choice and best.choice else None)
    row = {"workload": name, "min_workers": scope, "exact_s": round(exact_s, 4),
           "two_stage_s": round(two_stage_s, 4), "exhaustive_s": round(exhaustive_s, 2),
           "speedup": round(exhaustive_s / exact_s, 1),
           "exact_equals_exhaustive": same(best, reference),
           "two_stage_cost_gap": None if gap is None else round(gap, 4),
           "evaluated": best.evaluated, "configurations": reference.evaluated}
    gap_text = "n/a" if gap is None else f"{gap:+.1%}"
    print(f"{name:<20} {scope:>3} {exact_s:>8.3f} {two_stage_s:>9.3f} {exhaustive_s:>9.1f} "
          f"{exhaustive_s / exact_s:>7.0f}x {row['exact_equals_exhaustive']!s:>6} "
          f"{gap_text:>11}  {best.evaluated:,} of {reference.evaluated:,}", flush=True)
    return row


def paper_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {}
    return {"all_exact_equal_exhaustive": all(r["exact_equals_exhaustive"] for r in rows),
            "min_speedup": min(r["speedup"] for r in rows),
            "max_exact_s": max(r["exact_s"] for r in rows)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--channel", choices=("s3", "valkey"), default="s3")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-workers", type=int, nargs="+", default=[1, 2],
                        help="scopes to run: 1 = any W (standalone allowed), 2 = distributed")
    parser.add_argument("--bn-rule", choices=("align", "search"), default="align",
                        help="B^n of the paper section (the large one runs both)")
    parser.add_argument("--large-only", action="store_true", help="skip the paper section")
    parser.add_argument("--one", nargs=4, metavar=("NAME", "CAP", "CHANNEL", "RULE"),
                        help=argparse.SUPPRESS)  # the child of the large section
    args = parse_args(parser, argv, repeats=1, min_workers=[2])
    if args.one:
        name, cap, channel, rule = args.one
        print(json.dumps(one_search(name, int(cap), channel, rule)))
        return
    rows: list[dict[str, Any]] = []
    if not args.large_only:
        print(f"{'workload':<20} {'W>=':>3} {'exact s':>8} {'2-stage s':>9} "
              f"{'exhaust s':>9} {'speedup':>8} {'equal':>6} {'2-stage gap':>11}  evaluated",
              flush=True)
        workloads = SMOKE_WORKLOADS if args.smoke else WORKLOADS
        rows = [paper_row(name, spec, scope, args.channel, args.bn_rule, args.repeats)
                for scope in args.min_workers for name, spec in workloads.items()]
    large = large_section(args.channel, SMOKE_LARGE if args.smoke else large_searches())
    summary = {
        "benchmark": "planner_search", "channel": args.channel, "bn_rule": args.bn_rule,
        "workloads": rows, **paper_summary(rows), "large": large,
        "max_large_s": max(r["seconds"] for r in large),
        "max_large_peak_rss_mb": max(r["peak_rss_mb"] for r in large),
        "goals": {"speedup": 100, "exact_s": 0.5, "large_s": GOALS_LARGE["seconds"],
                  "large_peak_rss_mb": GOALS_LARGE["peak_rss_mb"]},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
