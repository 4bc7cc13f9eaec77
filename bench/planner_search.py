"""Planner search benchmark: exact vs two-stage vs the exhaustive reference, per paper workload.

For each workload of FasDL Table IV (with the epochs tests/planner/test_paper.py derives), in one
run: the time of each search (exact and two-stage: median of repeats; exhaustive: once), whether
exact equals exhaustive, exact's speedup over exhaustive, and two-stage's cost gap to exact.
Goals: exact == exhaustive everywhere, speedup >= 100x, exact < 0.5 s per workload.
The last printed line is one JSON object.

    .venv/bin/python bench/planner_search.py [--channel s3|valkey] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from planner.heuristic import two_stage
from planner.model import Problem
from planner.profiles import load_platform, load_prices, load_workload
from planner.search import SearchResult, exact, exhaustive

WORKLOADS = {  # name: (deadline s, B^g_max, epochs)
    "bert-base-cola": (2500.0, 640, 6),
    "resnet50-cifar10": (8000.0, 1024, 19),
    "mobilenet-cifar10": (4000.0, 512, 21),
    "squeezenet-cifar10": (3000.0, 384, 20),
}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--channel", choices=("s3", "valkey"), default="s3")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-workers", type=int, nargs="+", default=[1, 2],
                        help="scopes to run: 1 = any W (standalone allowed), 2 = distributed")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    print(f"{'workload':<20} {'W>=':>3} {'exact s':>8} {'2-stage s':>9} {'exhaust s':>9} "
          f"{'speedup':>8} {'equal':>6} {'2-stage gap':>11}  configurations", flush=True)
    cases = [(name, spec, scope) for scope in args.min_workers
             for name, spec in WORKLOADS.items()]
    for name, (deadline, cap, epochs), scope in cases:
        problem = Problem(workload=load_workload(name), platform=load_platform(args.channel),
                          prices=load_prices(), epochs=epochs, deadline_s=deadline,
                          max_global_batch=cap, min_workers=scope)
        best, exact_s = timed(partial(exact, problem), args.repeats)
        heuristic, two_stage_s = timed(partial(two_stage, problem), args.repeats)
        started = time.perf_counter()
        reference = exhaustive(problem)
        exhaustive_s = time.perf_counter() - started
        gap = (heuristic.choice.cost_usd / best.choice.cost_usd - 1.0
               if heuristic.choice and best.choice else None)
        row = {"workload": name, "min_workers": scope, "exact_s": round(exact_s, 4),
               "two_stage_s": round(two_stage_s, 4), "exhaustive_s": round(exhaustive_s, 2),
               "speedup": round(exhaustive_s / exact_s, 1), "exact_equals_exhaustive":
               same(best, reference), "two_stage_cost_gap": None if gap is None else
               round(gap, 4), "configurations": best.evaluated}
        rows.append(row)
        gap_text = "n/a" if gap is None else f"{gap:+.1%}"
        print(f"{name:<20} {scope:>3} {exact_s:>8.3f} {two_stage_s:>9.3f} {exhaustive_s:>9.1f} "
              f"{exhaustive_s / exact_s:>7.0f}x {row['exact_equals_exhaustive']!s:>6} "
              f"{gap_text:>11}  {best.evaluated:,}", flush=True)
    summary = {
        "benchmark": "planner_search", "channel": args.channel, "workloads": rows,
        "all_exact_equal_exhaustive": all(r["exact_equals_exhaustive"] for r in rows),
        "min_speedup": min(r["speedup"] for r in rows),
        "max_exact_s": max(r["exact_s"] for r in rows),
        "goals": {"speedup": 100, "exact_s": 0.5},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
