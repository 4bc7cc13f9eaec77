"""bench/convergence.py: its CIFAR-shaped set, its gap arithmetic and a short run of a case."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from bench import convergence
from fasdl.training.data import Partition


def test_rgb32_keeps_each_digit_and_has_cifars_shape() -> None:
    x = np.zeros((5, 1, 8, 8), dtype=np.uint8)
    x[:, 0, 2:6, 3] = 255  # a vertical stroke
    coloured = convergence.rgb32(x, seed=0)
    assert coloured.shape == (5, 3, 32, 32) and coloured.dtype == np.uint8
    stroke, paper = coloured[:, :, 8:24, 12:16], coloured[:, :, 0:4, 0:4]
    assert np.all(np.abs(stroke.mean((2, 3)) - paper.mean((2, 3))) > 20)  # ink differs
    assert not np.array_equal(coloured[0], coloured[1])  # colours vary per image


def test_summary_takes_the_worst_gap_per_sync_mode() -> None:
    results = {"a": {"runs": {"bsp-K1": {"gap_points": 0.2}, "hap-K1": {"gap_points": 1.0},
                              "hap-K2": {"gap_points": 1.7}}},
               "b": {"runs": {"bsp-K4": {"gap_points": -0.3}, "hap-K4": {"gap_points": 0.1}}}}
    summary = convergence.summary(results)
    assert summary["max_gap_points"] == {"bsp": 0.2, "hap": 1.7, "hap-paper": None}
    assert summary["goals_met"] is False  # hap 1.7 > 1.5
    # the paper's merge is reported on its own and has no goal
    results["a"]["runs"] = {"hap-K1": {"gap_points": 1.0}, "hap-paper-K1": {"gap_points": 4.0}}
    summary = convergence.summary(results)
    assert summary["max_gap_points"] == {"bsp": -0.3, "hap": 1.0, "hap-paper": 4.0}
    assert summary["goals_met"] is True


def test_gaps_over_seeds_are_taken_between_the_means() -> None:
    per_seed = [{"metric": "accuracy", "reference": ref, "runs": {"hap-K1": {"accuracy": got,
                                                                          "gap_points": 0}}}
                for ref, got in ((0.90, 0.88), (0.94, 0.94))]
    combined = convergence.over_seeds(per_seed)
    assert combined["reference"] == 0.92 and combined["seeds"] == 2
    assert combined["runs"]["hap-K1"] == {"accuracy": 0.91, "gap_points": 1.0}
    assert convergence.over_seeds(per_seed[:1]) is per_seed[0]


@pytest.mark.slow
def test_a_short_case_trains_each_kind_of_configuration(tmp_path: Path) -> None:
    case = convergence.Case("digits", "cnn", epochs=1)
    assert convergence.run_names(case) == [
        *(f"{s}-K{k}" for s in ("bsp", "hap") for k in (1, 2, 4)), "hap-paper-K1",
        "hap-paper-K2"]
    chosen = {"bsp-K4", "hap-K4", "hap-K1", "hap-paper-K1"}
    result = convergence.run_case(case, tmp_path, lambda text: None, chosen)
    assert set(result["runs"]) == chosen
    assert result["iterations"] == 22 and result["global_batch"] == 64
    # K = W has no non-aggregator: hap and bsp are the same run, to the bit
    assert result["runs"]["bsp-K4"]["accuracy"] == result["runs"]["hap-K4"]["accuracy"]
    assert all(0.0 <= run["accuracy"] <= 1.0 for run in result["runs"].values())


def test_the_batch4x_case_scales_the_rate_the_way_plans_do() -> None:
    case = convergence.CASES["digits-batch4x"]
    train = Partition(np.zeros((1438, 1, 8, 8), np.uint8), np.zeros(1438, np.int64))  # digits'
    reference = convergence.make_plan(case, train, 1, "bsp", workers=case.base_workers)
    run = convergence.make_plan(case, train, 1, "hap-paper")
    assert (reference.global_batch, reference.training.learning_rate) == (16, 0.05)
    assert reference.training.warmup_iterations == 0
    assert run.global_batch == 4 * reference.global_batch
    t = run.training
    assert (t.sync, t.hap_merge, t.lr_scaling, t.base_batch) == ("hap", "paper", "linear", 16)
    assert t.learning_rate == pytest.approx(0.2)
    # Goyal et al.'s warm-up: 5 of the 40 epochs, from the base rate
    assert t.warmup_iterations == 5 * run.iterations_per_epoch
    assert t.warmup_start_learning_rate == 0.05


@pytest.mark.slow
def test_the_text_case_trains_bert_mini_with_adamw(tmp_path: Path) -> None:
    # a quarter of the split: the text path, not how far it trains (the bench's full case)
    case = dataclasses.replace(convergence.CASES["text"], epochs=1, train_rows=512)
    train, _ = convergence.load_case(case, tmp_path / "data")
    plan = convergence.make_plan(case, train, 1, "hap")
    assert (plan.training.optimizer, plan.training.lr_schedule) == ("adamw", "linear")
    assert plan.training.warmup_iterations == round(0.1 * plan.total_iterations) > 0
    # its runs are bsp and hap at K = 1 and 2 (= W); every configuration running is the digits
    # case's test: here one per sync mode and K, hap K = 1 (a non-aggregator re-applies its
    # step) and bsp K = W (all aggregators), through the reference and K-REDUCE's text path
    assert convergence.run_names(case) == ["bsp-K1", "bsp-K2", "hap-K1", "hap-K2",
                                           "hap-paper-K1"]
    result = convergence.run_case(case, tmp_path / "run", lambda text: None,
                                  {"hap-K1", "bsp-K2"})
    assert result["metric"] == "mcc" and result["iterations"] == 8
    assert set(result["runs"]) == {"hap-K1", "bsp-K2"}
    assert all(-1.0 <= run["mcc"] <= 1.0 for run in result["runs"].values())
    assert -1.0 <= result["reference"] <= 1.0


def test_a_run_outside_the_cases_is_refused_naming_the_runs_there(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        convergence.main(["--case", "text", "--run", "hap-K4"])
    assert stopped.value.code == 2
    assert "--run hap-K4" in capsys.readouterr().err
    summary = convergence.summary({"a": {"runs": {"hap-K1": {"gap_points": 1.2}}}})
    assert summary["max_gap_points"] == {"bsp": None, "hap": 1.2, "hap-paper": None}
    assert summary["goals_met"]


def test_only_the_chosen_runs_are_made(tmp_path: Path) -> None:
    case = convergence.Case("digits", "cnn", epochs=1)
    result = convergence.run_case(case, tmp_path, lambda text: None, {"hap-K1"})
    assert set(result["runs"]) == {"hap-K1"}
    assert 0.0 <= result["runs"]["hap-K1"]["accuracy"] <= 1.0
