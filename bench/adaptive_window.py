"""Whether bench/adaptive.py's ``slower-2x-transfer`` case can be set on this machine: the
bench's network with its parameters grown to larger sizes (the exchange's bytes; the compute
unchanged), and for each the case's setting as the planner predicts it on this machine's profile
(not calibrated by a run; bench.adaptive's cases are).

Per size: the case's deadline (adaptive_setup.binding_deadline), whether it binds, the plan made
from a profile with 2x faster transfers, that configuration's time on this machine's platform
over the deadline (``missed``: the static run must miss it by 5 %), and the earliest an adaptive
run can keep (``reachable``: its first segment at the planned configuration, which it measures
before it can change, then the fastest configuration within the ceiling), over the deadline.
The case can be set where the deadline binds, the plan misses it and ``reachable`` x 1.03 (the
bench's least slack) keeps it.

    .venv/bin/python -m bench.adaptive_window [--profile-dir DIR] [--memory-mb M] [--ceiling N]

Prints a JSON line per size and one JSON object as its last line (``rows``, ``settable``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.adaptive import (
    CEILING,
    EPOCHS,
    FACTOR,
    MAX_GLOBAL_BATCH,
    MEMORY_MB,
    MODEL,
    machine_profiles,
)
from bench.adaptive_setup import (
    Profiles,
    Setting,
    binding_deadline,
    cheapest,
    planning_deadline,
    predicted_s,
    problem,
    scaled,
    window,
)
from bench.local_runs import scratch
from planner.model.inputs.profiles import load_prices

SIZES_MB = (2.0, 4.0, 8.0, 16.0, 32.0, 48.0, 64.0)  # and the network's own


def with_model_mb(profiles: Profiles, model_mb: float) -> Profiles:
    workload = profiles.workload
    return replace(profiles, workload=replace(
        workload, workload=replace(workload.workload, model_mb=model_mb)))


def transfer_case(setting: Setting, base: Profiles) -> dict[str, Any]:
    """The transfer case's setting for ``base`` (module docstring)."""
    planned, true = scaled(base, 1.0, 1 / FACTOR), base
    deadline, binds = binding_deadline(setting, planned, true)
    choice = cheapest(problem(setting, planned, planning_deadline(deadline)))
    row: dict[str, Any] = {"model_mb": round(base.workload.model_mb, 2),
                           "deadline_s": round(deadline, 1), "binds": binds}
    if choice is None:
        return {**row, "settable": False, "planned": None}
    on_true = predicted_s(setting, true, choice)
    return {**row, "planned": {"workers": choice.workers, "aggregators": choice.aggregators,
                               "time_s": round(choice.time_s, 1),
                               "true_time_s": round(on_true, 1)},
            **window(setting, true, deadline, binds, on_true)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.adaptive_window",
                                     description=__doc__.split("\n", 1)[0])
    parser.add_argument("--profile-dir", type=Path,
                        help="reuse (or write) this machine's profile of the network here")
    parser.add_argument("--memory-mb", type=int, default=MEMORY_MB,
                        help=f"the functions' memory (default {MEMORY_MB})")
    parser.add_argument("--ceiling", type=int, default=CEILING,
                        help=f"the most workers (default {CEILING})")
    args = parser.parse_args(argv)
    folder = args.profile_dir or scratch("fasdl-bench-adaptive-window-") / "profile"
    base = machine_profiles(MODEL, args.memory_mb, folder, smoke=False)
    setting = Setting(args.memory_mb, args.ceiling, EPOCHS, MAX_GLOBAL_BATCH, load_prices())
    rows = []
    for size in (base.workload.model_mb, *SIZES_MB):
        rows.append(transfer_case(setting, with_model_mb(base, size)))
        print(json.dumps(rows[-1]), flush=True)
    summary = {"bench": "adaptive_window", "model": MODEL, "memory_mb": args.memory_mb,
               "ceiling": args.ceiling, "epochs": EPOCHS, "factor": FACTOR, "rows": rows,
               "settable": any(r["settable"] for r in rows)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
