"""Every benchmark without a local run, at its smoke size (bench/smoke.py): the whole path runs
in a child process, its last line is the JSON object it promises, and docs/results.md and
docs/results/ stay as they are. The local runs' benches are in test_bench_smoke_runs.py,
bench.orchestration's in test_orchestration.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.bench.smoke_run import ROOT, docs_untouched, run_smoke

__all__ = ["docs_untouched"]  # the fixture, used by name

STEP_OVERHEAD = {"bench", "model", "batch", "threads", "plain_cpu_ms", "worker_cpu_ms", "ratio",
                 "wall_ratio_median", "wall_ratio_best", "goal", "ok"}
TORCH_WHEELS = Path("/opt/wheels")  # where tests/layer's build finds its torch wheel too


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("docs_untouched")
def test_planner_search_smoke() -> None:
    summary, _ = run_smoke("planner_search", timeout_s=240)
    assert {"benchmark", "channel", "bn_rule", "workloads", "all_exact_equal_exhaustive",
            "min_speedup", "max_exact_s", "large", "max_large_s", "max_large_peak_rss_mb",
            "goals"} <= set(summary)
    assert [(w["workload"], w["min_workers"]) for w in summary["workloads"]] == [
        ("squeezenet-cifar10", 2)]
    assert summary["all_exact_equal_exhaustive"]  # the exact search's optimum is the grid's
    [large] = summary["large"]  # from its child process
    assert (large["workload"], large["max_global_batch"], large["bn_rule"]) == (
        "resnet50-cifar10", 8192, "align")
    assert large["choice"] is not None and large["peak_rss_mb"] > 0


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("docs_untouched")
def test_planner_frontier_smoke() -> None:
    summary, _ = run_smoke("planner_frontier", timeout_s=240)
    assert summary["benchmark"] == "planner_frontier"
    [row] = summary["rows"]
    assert {"workload", "channel", "png", "cost_at_deadline", "saving_vs_best_baseline"} <= set(
        row)
    assert row["cost_at_deadline"]["kreduce"] is not None
    assert not Path(row["png"]).resolve().is_relative_to(ROOT)  # a temporary folder


@pytest.mark.servers
@pytest.mark.timeout(300)
def test_channel_smoke() -> None:
    summary, _ = run_smoke("channel", timeout_s=240)
    assert {"bench", "repeats", "goal_ratio", "min_ratio", "ratios", "median_s"} <= set(summary)
    assert set(summary["ratios"]) == {"valkey_1mb", "s3_1mb"} and summary["repeats"] == 1
    assert all(ratio > 0 for ratio in summary["ratios"].values())


@pytest.mark.timeout(300)
def test_step_overhead_smoke() -> None:
    summary, _ = run_smoke("step_overhead", timeout_s=240)
    assert set(summary) >= STEP_OVERHEAD and summary["bench"] == "step_overhead"
    assert summary["plain_cpu_ms"] > 0 and summary["worker_cpu_ms"] > 0


@pytest.mark.timeout(300)
def test_fuzz_inputs_smoke() -> None:
    summary, _ = run_smoke("fuzz_inputs", timeout_s=240)
    assert {"bench", "seed", "doors", "failures"} <= set(summary)
    # bench/fuzz_runtime_doors.py is no bench of its own: its doors run here
    assert {d["door"]: d["cases"] for d in summary["doors"]} == {
        door: 5 for door in ("plan", "workload", "platform", "flags", "console", "archive")}
    assert summary["failures"] == 0, summary["doors"]


@pytest.mark.servers
@pytest.mark.timeout(300)
def test_memory_roles_smoke() -> None:
    summary, _ = run_smoke("memory_roles", timeout_s=240)
    assert summary["benchmark"] == "memory_roles"
    rows = summary["rows"]
    assert {row["role"] for row in rows} == {"aggregator", "non-aggregator"}
    for row in rows:
        assert {"workload", "worker", "role", "batch", "peak_rss_mb", "modelled_mb", "cap_mb",
                "memory_mb"} <= set(row)
        assert row["workload"] == "squeezenet-cifar10" and row["batch"] == 4


@pytest.mark.timeout(300)
def test_convergence_smoke() -> None:
    summary, _ = run_smoke("convergence", timeout_s=240)
    assert {"benchmark", "cases", "max_gap_points", "goal_points", "goals_met",
            "exchange_dtype"} <= set(summary)
    digits = summary["cases"]["digits"]
    assert set(digits["runs"]) == {"bsp-K4", "hap-K1"} and digits["iterations"] == 22
    assert set(summary["max_gap_points"]) == {"bsp", "hap", "hap-paper"}


@pytest.mark.timeout(300)
def test_convergence_adaptive_smoke() -> None:
    """The change of configuration at the middle epoch's start runs for both sync modes (the
    changed workers restore from the checkpoint by the rule, tests/runtime/test_reshape.py)
    and both runs learn: past chance (0.1) after two epochs."""
    summary, _ = run_smoke("convergence_adaptive", timeout_s=240)
    assert summary["benchmark"] == "convergence_adaptive" and summary["epochs"] == 2
    assert summary["change"] == {"epoch": 1, "workers": [4, 2], "aggregators": [2, 1]}
    for sync in ("bsp", "hap"):
        run = summary["runs"][sync]
        assert run["adaptive"] > 0.2 and run["static"] > 0.2, run
        assert run["gap_points"] == pytest.approx(100 * (run["static"] - run["adaptive"]),
                                                  abs=0.02)


@pytest.mark.network  # without a torch wheel in /opt/wheels, the layer build runs pip
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("docs_untouched")
def test_cold_start_smoke() -> None:
    wheels = sorted(TORCH_WHEELS.glob("torch-*+cpu-cp311-*x86_64.whl"))
    wheel = os.environ.get("FASDL_TORCH_WHEEL") or (str(wheels[-1]) if wheels else None)
    summary, stdout = run_smoke("cold_start", timeout_s=540,
                                env={"FASDL_TORCH_WHEEL": wheel} if wheel else None)
    assert {"bench", "layer", "host_cores", "load_average", "init_limit_s", "safety_margin",
            "smallest_memory_mb", "smallest_memory_workloads", "points", "decision",
            "elapsed_s"} <= set(summary)
    [point] = summary["points"]  # one vCPU, once
    assert (point["memory_mb"], point["vcpu"], point["repeats"]) == (1769, 1.0, 1)
    assert summary["torch_load_cpu_s"] > 0  # the planner's constant, from that point
    assert point["cold"]["outcomes"] == ["installed"] and point["warm"]["outcomes"] == ["reused"]
    assert summary["decision"].startswith(("init:", "lazy:"))
    assert "at 1769 MB" in summary["decision"]
    # its JSON went to a temporary folder: docs/results/cold_start.json is docs_untouched's
    assert "cold_start writes what it would write under docs/ to" in stdout
