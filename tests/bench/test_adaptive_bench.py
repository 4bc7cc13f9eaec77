"""bench/adaptive.py's pure logic: scaled profiles, the binding deadline and each case's
goal."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.adaptive import CASES, goal_of
from bench.adaptive_setup import (
    PLAN_SLACK,
    Profiles,
    Setting,
    binding_deadline,
    calibrated,
    cheapest,
    fastest_s,
    planning_deadline,
    predicted_s,
    problem,
    scaled,
)
from planner.model.inputs.profiles import load_platform, load_prices, load_workload

BASE = Profiles(load_workload("cnn-digits"), load_platform("s3"))
SETTING = Setting(memory_mb=1024, ceiling=4, epochs=6, max_global_batch=64,
                  prices=load_prices())


def test_a_slower_platform_scales_compute_and_transfers_by_the_factor() -> None:
    slower = scaled(BASE, 2.0, 3.0)
    assert slower.workload.a == pytest.approx(2 * BASE.workload.a)
    assert slower.platform.torch_load_cpu_s == pytest.approx(2 * BASE.platform.torch_load_cpu_s)
    assert slower.platform.up_peak == pytest.approx([p / 3 for p in BASE.platform.up_peak])
    m, batch = SETTING.memory_mb, 32
    assert float(slower.workload.train_time(batch, m)) == pytest.approx(
        2 * float(BASE.workload.train_time(batch, m)))
    assert float(slower.platform.transfer_time("up", m, 4.0)) == pytest.approx(
        3 * float(BASE.platform.transfer_time("up", m, 4.0)))
    assert scaled(BASE, 1.0, 1.0) == BASE


def compute_bound(times: float) -> Profiles:
    """squeezenet's size at ``times`` its paper compute: more workers pay (at the shipped,
    GPU-fast compute W = 1 is the fastest at every deadline)."""
    squeezenet = load_workload("squeezenet-cifar10")
    return Profiles(replace(squeezenet, a=times * squeezenet.a), BASE.platform)


# compute 50x: slower compute is what a plan misses; 3x: transfers matter enough that twice as
# slow misses the deadline by 5 % though the plan aims 10 % below it (PLAN_SLACK)
@pytest.mark.parametrize(("times", "true"), [(50.0, (2.0, 1.0)), (3.0, (1.0, 2.0))])
def test_the_deadline_binds_a_configuration_keeps_it_and_the_plans_misses_it(
        times: float, true: tuple[float, float]) -> None:
    base = compute_bound(times)
    slower = scaled(base, *true)
    deadline, binds = binding_deadline(SETTING, base, slower)
    assert binds
    aim = planning_deadline(deadline)
    assert aim == pytest.approx(deadline / PLAN_SLACK)
    oracle = cheapest(problem(SETTING, slower, deadline))
    assert oracle is not None and oracle.time_s <= deadline
    planned = cheapest(problem(SETTING, base, aim))
    free = cheapest(problem(SETTING, base, 1e6))
    assert planned is not None and free is not None and planned.cost_usd > free.cost_usd
    assert predicted_s(SETTING, slower, planned) >= 1.05 * deadline
    assert deadline >= 1.03 * fastest_s(SETTING, slower) * 0.9999


def test_on_a_faster_platform_the_plan_exists_and_keeps_the_deadline() -> None:
    base = compute_bound(50.0)
    planned = scaled(base, 2.0, 2.0)
    deadline, binds = binding_deadline(SETTING, planned, base)
    choice = cheapest(problem(SETTING, planned, planning_deadline(deadline)))
    assert binds and choice is not None
    assert predicted_s(SETTING, base, choice) < planning_deadline(deadline)
    # the least binding deadline: the plan bought speed, which fewer workers give here
    assert deadline == pytest.approx(1.03 * PLAN_SLACK * fastest_s(SETTING, planned))
    oracle = cheapest(problem(SETTING, base, deadline))
    assert oracle is not None and oracle.workers < choice.workers


def test_as_planned_the_deadline_binds_within_the_fastest_times_share() -> None:
    base = compute_bound(20.0)
    deadline, binds = binding_deadline(SETTING, base, base)
    fastest = fastest_s(SETTING, base) * PLAN_SLACK  # the plan aims PLAN_SLACK lower
    assert binds and fastest * 1.03 <= deadline * 1.0001 and deadline <= fastest * 1.25
    choice = cheapest(problem(SETTING, base, planning_deadline(deadline)))
    assert choice is not None  # the plan keeps the deadline with PLAN_SLACK to spare
    assert predicted_s(SETTING, base, choice) * PLAN_SLACK <= deadline * 1.0001


def test_each_goal_judges_its_own_runs() -> None:
    by_name = {case.name: case for case in CASES}
    missed = {"met": False, "cost_usd": 1.0, "changes": 0}
    kept = {"met": True, "cost_usd": 1.1, "changes": 2}
    assert goal_of(by_name["slower-2x-compute"], missed, kept, 1.0)[1]
    assert not goal_of(by_name["slower-2x-compute"], missed, kept, 0.9)[1]  # past 1.15x
    assert not goal_of(by_name["slower-2x-compute"], kept, kept, 1.0)[1]  # static kept it
    assert goal_of(by_name["faster-2x-cost"], {**kept, "cost_usd": 2.0}, kept, None)[1]
    assert not goal_of(by_name["faster-2x-cost"], kept, kept, None)[1]
    same = {"met": True, "cost_usd": 1.0, "changes": 0}
    assert goal_of(by_name["as-planned"], same, {**same, "cost_usd": 1.01}, None)[1]
    assert not goal_of(by_name["as-planned"], same, {**same, "changes": 1}, None)[1]


def test_the_calibrated_profile_moves_every_cpu_with_the_compute() -> None:
    """As the run's own refit (planner/adapt/online_calibration.py): a calibration run that
    measured half the profiled compute halves the step's and the exchange client's CPU too,
    else the model's CPU bound kept the profiler's pace and over-predicted every case."""
    base = Profiles(replace(BASE.workload, cpu_step_s=0.02, cpu_sample_s=0.001),
                    replace(BASE.platform, cpu_fold_mb_s=0.004))
    measured = {"a": BASE.workload.a / 2, "b": BASE.workload.b, "exchange_factor": 1.0,
                "segment_overhead_s": 2.0, "cold_start_s": 6.0}
    report = {"status": "SUCCEEDED", "adaptations": [{"measured": measured}]}
    true = calibrated(base, SETTING, report)
    assert true.workload.a == pytest.approx(BASE.workload.a / 2)
    assert true.workload.cpu_step_s == pytest.approx(0.01, rel=1e-4)
    assert true.workload.cpu_sample_s == pytest.approx(0.0005, rel=1e-4)
    assert true.platform.cpu_fold_mb_s == pytest.approx(0.002, rel=1e-4)
    assert true.platform.segment_overhead_s == 2.0
