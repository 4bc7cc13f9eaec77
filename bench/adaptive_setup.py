"""bench/adaptive.py's setting: this machine's profile, scaled platforms, the deadline, the plans.

* **This machine's profile**: ``python -m local profile`` of the model at the bench's memory
  size (compute and transfers under Lambda emulation), then one short calibration run
  (:func:`calibrated`): an adaptive run under a deadline it keeps with ease, so it changes
  nothing, whose decisions record what it measured of itself online: compute and exchange as
  the run steps them (the profiler's short steps time the emulation's CPU cap unevenly), the
  cold start of a local sandbox and each segment's overhead between segments
  (PlatformProfile.segment_overhead_s), which the profiler cannot see.
* **Scaled profiles** (:func:`scaled`): compute f times slower multiplies the training fit's
  ``a``, the data loader's CPU, the exchange client's CPU and the torch load by f; transfers f
  times slower divide the transfer peaks by f. A case plans on this machine's profile scaled
  and runs here.
* **The deadline** (:func:`binding_deadline`): what the runs must keep (the plan's
  ``limits.deadline_s``), while the plan aims 10 % lower (:data:`PLAN_SLACK`, as planner plan's
  ``--deadline-slack``): between 1.03x and 1.25x the fastest time within the ceiling on the
  case's true platform (so that a configuration keeps it; and the planned platform's times
  10 % higher, so that a plan exists) and below 0.97x the time of the cheapest plan without a
  deadline (so that it binds); on a platform slower than the plan's profile, the largest
  such deadline at which the plan's configuration, predicted on the true platform, misses it
  by 5 %; on a faster one the least (1.03x the planned platform's fastest time, with the
  plan's 10 %): the plan had to buy speed that the platform gives for less, the case a
  scale-in is for. The row says whether it binds.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from local.lambda_.sandbox import DEFAULT_IDLE_S
from local.run.run_options import RunOptions
from local.run.runner import run
from planner.adapt import profiles_file
from planner.adapt.online_calibration import scaled_cpu, scaled_transfers
from planner.commands.planfile import to_plan
from planner.fit.refit import with_step_cpu_of
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import (
    PlatformProfile,
    Prices,
    WorkloadProfile,
)
from planner.model.terms.cost_model import evaluate
from planner.search.searches import Choice, exact

Say = Callable[[str], None]
TIMEOUT_S = 900.0
# deadlines between these shares of the fastest time on the true platform, below BIND of the
# cheapest plan's time without one; the largest at which the plan's configuration misses by MISS
LEAST_SLACK, MOST_SLACK, BIND, MISS = 1.03, 1.25, 0.97, 0.05
# plans aim at the deadline / PLAN_SLACK (planner plan's --deadline-slack, 1.25 by default):
# identical runs here differ by up to ~7 % in time, so a plan aimed at the deadline itself
# missed it by chance as often as not
PLAN_SLACK = 1.10


class SetupError(RuntimeError):
    """A setting the bench cannot make: the message says what and why."""


@dataclass(frozen=True)
class Setting:
    """What every case shares: the model, memory, ceiling, epochs and the global batch cap."""

    memory_mb: int
    ceiling: int
    epochs: int
    max_global_batch: int
    prices: Prices
    # the deadline times this: the smoke size runs inside a loaded test suite, where timing
    # must decide nothing (runs there took 1.8x their prediction)
    deadline_scale: float = 1.0


@dataclass(frozen=True)
class Profiles:
    workload: WorkloadProfile
    platform: PlatformProfile


def scaled(profiles: Profiles, compute: float, transfer: float) -> Profiles:
    """``profiles`` on a platform ``compute`` times slower in CPU and ``transfer`` in
    transfers (module docstring)."""
    workload, platform = profiles.workload, profiles.platform
    workload = replace(workload, a=workload.a * compute,
                       cpu_step_s=workload.cpu_step_s * compute,
                       cpu_sample_s=workload.cpu_sample_s * compute)
    platform = scaled_cpu(scaled_transfers(platform, transfer), compute)
    return Profiles(workload, replace(platform,
                                      torch_load_cpu_s=platform.torch_load_cpu_s * compute))


def problem(setting: Setting, profiles: Profiles, deadline_s: float, *,
            workers: int | None = None) -> Problem:
    """The bench's problem: fixed M, W up to the ceiling (or exactly ``workers``), a warm
    cache, a segment per epoch at most (the cases' >= 6 segments)."""
    per_epoch = profiles.workload.workload.samples // setting.max_global_batch
    return Problem(workload=profiles.workload, platform=profiles.platform,
                   prices=setting.prices, epochs=setting.epochs, deadline_s=deadline_s,
                   max_global_batch=setting.max_global_batch, timeout_s=TIMEOUT_S,
                   memory_min_mb=setting.memory_mb, memory_max_mb=setting.memory_mb,
                   memory_step_mb=1, min_workers=workers or 1,
                   max_workers=workers or setting.ceiling, cache_warm=True,
                   segment_iterations_max=max(1, per_epoch))


def cheapest(problem_: Problem) -> Choice | None:
    return exact(problem_).choice


def write_plan(problem_: Problem, choice: Choice, path: Path, *, policy: str,
               ceiling: int, budget_usd: float) -> Path:
    """The plan file: one segment per epoch, the guard's deadline :data:`PLAN_SLACK` times the
    problem's, the policy and (adaptive) the ceiling, its profiles beside it."""
    plan = to_plan(problem_, choice, search="exact", budget_usd=budget_usd,
                   deadline_slack=PLAN_SLACK)
    per_epoch = plan.iterations_per_epoch
    training = dataclasses.replace(plan.training, segment_iterations=per_epoch,
                                   adaptive=policy)
    deployment = (plan.deployment if policy == "off"
                  else dataclasses.replace(plan.deployment, workers_max=ceiling))
    plan = dataclasses.replace(plan, training=training, deployment=deployment)
    plan.save(path)
    profiles_file.write_profiles(plan, path, (problem_.workload, problem_.platform,
                                              problem_.prices))
    return path


def run_local(plan: Path, cdk_out: Path, report_dir: Path, *, say: Say,
              timeout_s: float = 1800.0) -> dict[str, Any]:
    """One ``local run`` of ``plan`` under the emulation of the channel's shipped profile, warm
    sandboxes reused as by default; its report.json (any status)."""
    options = RunOptions(plan=plan, timeout_s=timeout_s, report_dir=report_dir, threads=None,
                         cdk_out=cdk_out, run_id=f"bench-{report_dir.name}",
                         emulate_lambda="default", warm_idle_s=DEFAULT_IDLE_S)
    run(options, say=say)
    path = report_dir / "report.json"
    if not path.is_file():
        raise SetupError(f"the local run of {plan} wrote no report; see {report_dir}")
    report: dict[str, Any] = json.loads(path.read_text())
    return report


def calibrated(base: Profiles, setting: Setting, report: dict[str, Any]) -> Profiles:
    """``base`` refitted by what an adaptive run measured of itself, as its last decision
    recorded it (planner/adapt/boundary.py): compute (a, b), the exchange factor, the segment
    overhead (over the warm segments since the first recorded boundary), the step's and the
    exchange client's CPU scaled with the compute, and from the first decision the cold start
    (as the torch load at the profile's invocation overhead)."""
    records = [a for a in report.get("adaptations") or [] if a.get("measured")]
    if report.get("status") != "SUCCEEDED" or not records:
        raise SetupError(f"the calibration run ended {report.get('status')} with "
                         f"{len(records)} decisions: {report.get('failure')}")
    last = records[-1]["measured"]
    cold = float(records[0]["measured"]["cold_start_s"])
    vcpus = min(setting.memory_mb / 1769.0, 1.0)
    # the step's and the exchange client's CPU move with the compute, as the run's refit did,
    # here at the global batch's per-worker batches within the ceiling
    batches = np.array([setting.max_global_batch // w for w in range(1, setting.ceiling + 1)])
    workload, cpu = with_step_cpu_of(replace(base.workload, a=float(last["a"]),
                                             b=float(last["b"])), base.workload,
                                     batches, setting.memory_mb)
    platform = scaled_cpu(scaled_transfers(base.platform, float(last["exchange_factor"])), cpu)
    platform = replace(platform, segment_overhead_s=float(last["segment_overhead_s"]),
                       torch_load_cpu_s=max(0.0, cold - platform.invocation_overhead_s) * vcpus)
    return Profiles(workload, platform)


def fastest_s(setting: Setting, profiles: Profiles) -> float:
    """The least time of any configuration within the ceiling."""
    every = [cheapest(problem(setting, profiles, 1e6, workers=w))
             for w in range(1, setting.ceiling + 1)]
    times = [choice.time_s for choice in every if choice is not None]
    if not times:
        raise SetupError("no configuration within the ceiling runs on this platform")
    return min(times)


def predicted_s(setting: Setting, profiles: Profiles, choice: Choice) -> float:
    """``choice``'s time on ``profiles``' platform."""
    at = evaluate(problem(setting, profiles, 1e6), choice.workers, setting.memory_mb,
                  choice.aggregators, choice.batch_aggregator, choice.batch_non_aggregator,
                  bsp=choice.sync == "bsp")
    return float(at.time_s[0])


def binding_deadline(setting: Setting, planned: Profiles, true: Profiles) -> tuple[float, bool]:
    """The case's deadline (module docstring) and whether it binds the planned configuration
    (the cheapest plan without a deadline would miss it). Over the slower platform's fastest
    time: a platform faster than planned keeps what the plan keeps."""
    fastest_true, fastest_planned = fastest_s(setting, true), fastest_s(setting, planned)
    fastest = max(fastest_true, fastest_planned * PLAN_SLACK)  # a plan aims lower
    free = cheapest(problem(setting, planned, 1e6))
    top = min(fastest * MOST_SLACK, BIND * PLAN_SLACK * free.time_s if free else math.inf)
    deadline = max(top, fastest * LEAST_SLACK)
    if fastest_true < fastest_planned:  # faster than planned: a plan that bought speed
        deadline = fastest * LEAST_SLACK
    if fastest_true > fastest_planned:  # the largest deadline the plan misses on the platform
        steps = 24
        for step in range(steps + 1):
            candidate = top - (top - fastest * LEAST_SLACK) * step / steps
            choice = cheapest(problem(setting, planned, planning_deadline(candidate)))
            if candidate >= fastest * LEAST_SLACK and choice is not None and predicted_s(
                    setting, true, choice) >= (1 + MISS) * candidate:
                deadline = candidate
                break
    return deadline, free is not None and free.time_s > planning_deadline(deadline)


def planning_deadline(deadline_s: float) -> float:
    """What a case's plan aims at: its deadline (the runs' limit) less :data:`PLAN_SLACK`."""
    return deadline_s / PLAN_SLACK


def window(setting: Setting, true: Profiles, deadline_s: float, binds: bool,
           on_true_s: float) -> dict[str, Any]:
    """Whether a slower platform's case can be set at ``deadline_s``: the plan's configuration
    on the true platform (``on_true_s``, :func:`predicted_s`) over the deadline (``missed``:
    the static run must miss it by :data:`MISS`), and the earliest an adaptive run can keep
    (``reachable``: its first segment at the planned configuration, which it measures before
    it can change, then the fastest within the ceiling) over the deadline, with
    :data:`LEAST_SLACK` to spare."""
    fastest = fastest_s(setting, true)
    reachable = on_true_s / setting.epochs + fastest * (setting.epochs - 1) / setting.epochs
    missed, kept = on_true_s / deadline_s, reachable / deadline_s
    return {"missed": round(missed, 3), "reachable": round(kept, 3),
            "settable": binds and missed >= 1 + MISS and kept * LEAST_SLACK <= 1.0}
