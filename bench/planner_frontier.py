"""Cost-vs-deadline frontiers of K-REDUCE, ScatterReduce and AllReduce for the paper workloads.

Writes docs/results/frontier-<workload>-<channel>.png (distributed runs, W >= 2, Table IV
constraints and the epochs of bench/planner_search.py) and, for each, how much cheaper
K-REDUCE is than the better baseline at the requested deadline (exact search per
pattern). The last printed line is one JSON object.

    .venv/bin/python bench/planner_frontier.py [--out docs/results]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.planner_search import WORKLOADS
from planner.model.problem import Problem
from planner.model.profiles import load_platform, load_prices, load_workload
from planner.report import render_frontier
from planner.search.searches import exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default="docs/results", help="folder for the PNGs")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for channel in ("s3", "valkey"):
        for name, (deadline, cap, epochs) in WORKLOADS.items():
            problem = Problem(workload=load_workload(name), platform=load_platform(channel),
                              prices=load_prices(), epochs=epochs, deadline_s=deadline,
                              max_global_batch=cap, min_workers=2)
            png = out / f"frontier-{name}-{channel}.png"
            curves = render_frontier(problem, str(png), points=30)
            at_deadline = {}
            for pattern in curves:
                choice = exact(problem, pattern).choice
                at_deadline[pattern] = None if choice is None else round(choice.cost_usd, 6)
            baselines = [c for p, c in at_deadline.items() if p != "kreduce" and c is not None]
            kreduce = at_deadline["kreduce"]
            saving = (1 - kreduce / min(baselines)) if kreduce and baselines else None
            rows.append({"workload": name, "channel": channel, "png": str(png),
                         "cost_at_deadline": at_deadline,
                         "saving_vs_best_baseline": None if saving is None else round(saving, 4)})
            text = "n/a" if saving is None else f"{saving:.1%}"
            print(f"{name:<20} {channel:<7} K-REDUCE saves {text:>6} vs the better baseline "
                  f"-> {png}", flush=True)
    print(json.dumps({"benchmark": "planner_frontier", "rows": rows}))


if __name__ == "__main__":
    main()
