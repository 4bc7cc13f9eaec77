"""bench/adaptive.py's pure logic: scaled platforms, the emulation's shaping profile, the
binding deadline and each case's goal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.adaptive import CASES, goal_of
from bench.adaptive_setup import (
    Profiles,
    Setting,
    binding_deadline,
    cheapest,
    problem,
    scaled,
    shaping_profile,
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


def test_the_shaping_profile_halves_the_shipped_peaks(tmp_path: Path) -> None:
    assert shaping_profile("s3", 1.0, tmp_path) == "default"
    path = Path(shaping_profile("s3", 2.0, tmp_path))
    shipped = load_platform("s3")
    written = json.loads(path.read_text())
    assert written["up_peak"] == pytest.approx([p / 2 for p in shipped.up_peak])
    assert written["name"].endswith("-2x-slower")


def test_the_deadline_binds_and_a_slower_platform_can_keep_it() -> None:
    slower = scaled(BASE, 2.0, 1.0)
    deadline, binds = binding_deadline(SETTING, BASE, [slower], 0.15)
    fastest = cheapest(problem(SETTING, slower, deadline))
    assert fastest is not None and fastest.time_s <= deadline  # the oracle exists
    planned = cheapest(problem(SETTING, BASE, deadline))
    free = cheapest(problem(SETTING, BASE, 1e6))
    assert planned is not None and free is not None
    assert binds == (free.time_s > deadline)
    if binds:
        assert planned.cost_usd > free.cost_usd  # the deadline costs something


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
