"""The benchmarks that run ``python -m local profile`` / ``local run`` under Lambda emulation, at
their smoke size (bench/smoke.py): one profile and one local run each, the JSON object each
promises as the last line, the docs left as they are (bench.chaos at its smoke size with five
trials: tests/local/faults/test_chaos.py).

bench.prediction and bench.patterns profile the same model at the same memories at this size:
they share one ``--profile-dir`` (the second reuses the first's profile when both run here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import prediction
from bench.local_runs import PROFILE_SMOKE
from tests.bench.smoke_run import docs_untouched, run_smoke

__all__ = ["docs_untouched"]  # the fixture, used by name


# both pay a whole local run (servers, synth, sandboxes), each within ten minutes
pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("docs_untouched"),
              pytest.mark.e2e, pytest.mark.servers, pytest.mark.synth, pytest.mark.sandbox]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke size's one profile, made here by the bench's own profile step (as
    ``bench.prediction --smoke`` makes it), so neither test's own item pays it."""
    folder = tmp_path_factory.mktemp("profiles")
    config = prediction.CONFIGS[0]
    prediction.profile(config.model, config.channel, prediction.profile_dir(folder, config),
                       prediction.SMOKE_MEMORIES, PROFILE_SMOKE)
    assert (prediction.profile_dir(folder, config) / "workload.json").is_file()
    return folder


def test_prediction_smoke(profiles: Path) -> None:
    summary, stdout = run_smoke("prediction", "--profile-dir", str(profiles), timeout_s=540)
    assert {"bench", "configs", "mean_abs_error", "max_abs_error", "goal_mean", "goal_max",
            "pipelined_mean_abs_error", "met", "rows"} <= set(summary)
    [row] = summary["rows"]
    assert (row["config"], row["workers"], row["memory_mb"]) == ("s3-w2-m1024-k1", 2, 1024)
    assert "reusing the cnn s3 profile" in stdout  # the fixture's, made by the same step
    assert row["predicted_s"] > 0 and row["measured_s"] > 0 and row["steady_iterations"] > 0
    assert "prediction writes what it would write under docs/" in stdout


def test_patterns_smoke(profiles: Path) -> None:
    summary, stdout = run_smoke("patterns", "--profile-dir", str(profiles), timeout_s=540)
    assert {"bench", "channel", "rows", "verdicts", "goal", "met"} <= set(summary)
    [row] = summary["rows"]  # every pattern planned, K-REDUCE run
    assert (row["case"], row["pattern"], row["workers"]) == ("cnn-s3", "kreduce", 2)
    assert row["measured_s"] > 0 and row["cost_usd"] > 0
    verdict = summary["verdicts"]["cnn-s3"]
    assert verdict["measured_order"] == ["kreduce"] and verdict["kreduce_not_slower"] is None
    assert summary["met"] is None  # nothing to compare with at this size
    assert "patterns writes what it would write under docs/" in stdout


def test_cache_scaling_smoke() -> None:
    """The shipped profiles (no profiling at this size), one epoch on an emulated fresh cache
    with a per-slot ceiling: the plan charges both, the relay ramps (its intervals are
    reported) and holds the slots. How the ramp's throttle fades is the full size's goal (and
    the relay's unit test's, tests/local/servers/test_ecpu_proxy.py)."""
    summary, stdout = run_smoke("cache_scaling", timeout_s=300)
    assert {"bench", "goal", "rows", "met"} <= set(summary)
    [row] = summary["rows"]
    assert row["fresh"] and row["hot_key"]
    assert row["predicted_ramp_s"] > 0 and row["measured_s"] > 0
    assert row["held_back_s_by_interval"], row  # the relay ramped by the plan's numbers
    assert row["held_back_at_slots_s"] > 0
    assert "cache_scaling writes what it would write under docs/" in stdout


def test_adaptive_smoke(profiles: Path) -> None:
    """bench.adaptive's whole path at its smallest: the smoke profile of the cnn (the
    fixture's), the calibration run, the as-planned case's static and adaptive runs of two
    segments."""
    cnn = prediction.profile_dir(profiles, prediction.CONFIGS[0])
    summary, stdout = run_smoke("adaptive", "--profile-dir", str(cnn), timeout_s=540)
    assert {"bench", "model", "ceiling", "segment_overhead_s", "cases", "met"} <= set(summary)
    [case] = summary["cases"]
    assert case["name"] == "as-planned" and case["deadline_s"] > 0
    assert {"time_s", "cost_usd", "status"} <= set(case["static"]) & set(case["adaptive"])
    assert case["static"]["status"] == "SUCCEEDED", stdout[-3000:]
    assert case["adaptive"]["status"] == "SUCCEEDED", stdout[-3000:]
    # on course under a deadline 3x the binding one: a deadline policy changes nothing
    assert case["adaptive"]["changes"] == 0 and case["oracle_cost_usd"] > 0
    assert "adaptive writes what it would write under docs/" in stdout
