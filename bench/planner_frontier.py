"""Cost-vs-deadline frontiers of K-REDUCE, ScatterReduce and AllReduce for the paper workloads.

Writes docs/results/frontier-<workload>-<channel>.png (distributed runs, W >= 2, Table IV
constraints and the epochs of bench/planner_search.py) and, for each, how much cheaper
K-REDUCE is than the better baseline at the requested deadline (exact search per
pattern). The last printed line is one JSON object.

    .venv/bin/python -m bench.planner_frontier [--out docs/results] [--points N] [--smoke]

``--smoke`` (or FASDL_BENCH_SMOKE=1, bench/smoke.py): one workload on S3, 3 deadlines, the
PNG in a temporary folder (docs/results/ is left as it is).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from bench.planner_search import WORKLOADS
from bench.smoke import parse_args, smoke_folder
from planner.commands.report import render_frontier
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import load_platform, load_prices, load_workload
from planner.search.searches import exact

CHANNELS = ("s3", "valkey")
SMOKE_WORKLOAD = "squeezenet-cifar10"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default="docs/results", help="folder for the PNGs")
    parser.add_argument("--points", type=int, default=30, help="deadlines per curve")
    args = parse_args(parser, argv, points=3)
    out = smoke_folder("planner_frontier") if args.smoke else Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workloads = ({SMOKE_WORKLOAD: WORKLOADS[SMOKE_WORKLOAD]} if args.smoke else WORKLOADS)
    rows = []
    for channel in CHANNELS[:1] if args.smoke else CHANNELS:
        for name, (deadline, cap, epochs) in workloads.items():
            problem = Problem(workload=load_workload(name), platform=load_platform(channel),
                              prices=load_prices(), epochs=epochs, deadline_s=deadline,
                              max_global_batch=cap, min_workers=2)
            png = out / f"frontier-{name}-{channel}.png"
            curves = render_frontier(problem, str(png), points=args.points)
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
