"""``planner plan --adaptive POLICY --workers-max N`` (planner/commands/adaptive_plan.py): the
plan records the policy and the ceiling, its profiles go beside it, and the re-plan rebuilds
the plan's own problem from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasdl.contract.plan import Plan
from planner.adapt.plan_problem import configuration_of, problem_of
from planner.adapt.profiles_file import read_profiles
from planner.adapt.replan import ReplanError
from planner.model.terms.cost_model import evaluate
from tests.planner.cli_helpers import SMALL, assert_bad, cli, run

SQUEEZENET = ["--workload", "squeezenet-cifar10", *SMALL]


def test_an_adaptive_plan_carries_its_policy_ceiling_and_profiles(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    code, document, _ = run(capsys, "plan", *SQUEEZENET, "--adaptive", "cost", "--workers-max",
                            "12", "--out", str(out))
    assert code == 0, document
    plan = Plan.load(out)
    assert (plan.training.adaptive, plan.deployment.workers_max) == ("cost", 12)
    assert plan.deployment.ceiling == 12 and plan.deployment.workers <= 12
    profiles = tmp_path / "plan.profiles.json"
    assert document["profiles"] == str(profiles)
    workload, platform, prices = read_profiles(profiles)
    # the profiles rebuild the plan's problem: its own configuration at its own cost
    problem = problem_of(plan, workload, platform, prices)
    config = configuration_of(plan)
    priced = evaluate(problem, config.workers, plan.deployment.memory_mb, config.aggregators,
                      config.batch_aggregator, config.batch_non_aggregator)
    assert plan.prediction is not None
    assert float(priced.cost_usd[0]) == pytest.approx(plan.prediction.cost_usd, rel=1e-4)


def test_plans_are_adaptive_by_default_with_twice_the_workers_as_ceiling(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    code, document, _ = run(capsys, "plan", *SQUEEZENET, "--out", str(out))
    assert code == 0, document
    plan = Plan.load(out)
    workers = plan.deployment.workers
    assert plan.training.adaptive == "deadline"
    assert plan.deployment.workers_max == max(workers, min(2 * workers, 450))
    assert document["profiles"] == str(tmp_path / "plan.profiles.json")


def test_the_printed_plan_says_what_a_drifting_run_does() -> None:
    code, out, _ = cli("plan", *SQUEEZENET)
    assert code == 0, out
    assert "adaptive run (deadline)" in out and "--adaptive off keeps the plan" in out
    assert "without --out no profiles file is written, and synth refuses the plan" in out
    code, out, _ = cli("plan", *SQUEEZENET, "--adaptive", "off")
    assert code == 0 and "static run (--adaptive off)" in out


@pytest.mark.parametrize(("quota", "reservable"), [(300, 100), (20, 0)])
def test_the_default_ceiling_leaves_lambda_its_unreserved_hundred(
        capsys: pytest.CaptureFixture[str], quota: int, reservable: int) -> None:
    """Within what ``-c reserve_concurrency=true`` can reserve (2 per worker, Lambda keeping
    100 unreserved), never below the chosen W."""
    code, document, _ = run(capsys, "plan", *SQUEEZENET, "--max-concurrency", str(quota))
    assert code == 0, document
    deployment = document["plan"]["deployment"]
    workers = deployment["workers"]
    assert deployment["workers_max"] == max(workers, min(2 * workers, reservable))


def test_a_static_plan_writes_no_profiles_and_the_ceiling_needs_a_policy(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    code, document, _ = run(capsys, "plan", *SQUEEZENET, "--adaptive", "off", "--out", str(out))
    assert code == 0 and document["profiles"] is None
    assert not (tmp_path / "plan.profiles.json").exists()
    plan = Plan.load(out)
    assert plan.training.adaptive == "off" and plan.deployment.workers_max is None
    code, document, stderr = run(capsys, "plan", *SQUEEZENET, "--adaptive", "off",
                                 "--workers-max", "8")
    assert_bad(code, document, stderr, "--workers-max", "drop --adaptive off or --workers-max")


def test_a_ceiling_below_the_chosen_workers_or_the_quota_names_the_range(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, document, _ = run(capsys, "plan", *SQUEEZENET, "--adaptive", "deadline")
    workers = document["plan"]["deployment"]["workers"]
    code, document, stderr = run(capsys, "plan", *SQUEEZENET, "--adaptive", "deadline",
                                 "--workers-max", str(workers - 1))
    assert_bad(code, document, stderr, "--workers-max", f"must be in [{workers}, 500]",
               f"got {workers - 1}")
    code, document, stderr = run(capsys, "plan", *SQUEEZENET, "--adaptive", "deadline",
                                 "--workers-max", "501")
    assert_bad(code, document, stderr, "--workers-max", "half the concurrency 1000")


def test_a_profiles_file_missing_a_section_is_named(tmp_path: Path) -> None:
    path = tmp_path / "plan.profiles.json"
    path.write_text(json.dumps({"workload": {}, "platform": []}))
    with pytest.raises(ReplanError, match="missing or not an object: platform, prices"):
        read_profiles(path)
    path.write_text("{not json")
    with pytest.raises(ReplanError, match="cannot be read"):
        read_profiles(path)
