"""``planner plan`` writes the guards' limits (fasdl.contract.limits): by default the planning
deadline x 1.25 and the predicted cost x 1.5, priced with the plan's Lambda prices;
``--budget-usd`` and ``--deadline-slack`` change them, and bad values name the flag, --deadline's
too when its limit would pass the contract's year."""

from __future__ import annotations

import pytest

from fasdl.contract.limits import MAX_DEADLINE_S
from fasdl.contract.plan import Plan
from planner.commands.cli_inputs import max_deadline_s
from planner.model.inputs.profiles import load_prices
from tests.planner.cli_helpers import SMALL, assert_bad, run

PLAN = ["plan", "--workload", "cnn-digits", *SMALL]


def test_limits_default_to_the_deadline_and_cost_with_headroom(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, document, _ = run(capsys, *PLAN)
    assert code == 0, document
    plan = Plan.from_dict({k: v for k, v in document["plan"].items() if k != "confidence"})
    assert plan.limits is not None and plan.prediction is not None
    assert plan.limits.deadline_s == 3000 * 1.25
    assert plan.limits.budget_usd == pytest.approx(plan.prediction.cost_usd * 1.5, rel=1e-3)
    prices = load_prices("us-east-1")
    assert plan.limits.lambda_usd_per_gb_s == pytest.approx(prices.lambda_gb_s["x86_64"])
    assert plan.limits.lambda_usd_per_request == prices.lambda_request
    code, document, _ = run(capsys, *PLAN, "--budget-usd", "2.5", "--deadline-slack", "2")
    assert code == 0 and document["plan"]["limits"]["budget_usd"] == 2.5
    assert document["plan"]["limits"]["deadline_s"] == 6000


@pytest.mark.parametrize(("flag", "value", "fragment"), [
    ("--budget-usd", "0", "must be in (0, 1e+09]"),
    ("--budget-usd", "-1", "got -1.0"),
    ("--deadline-slack", "0.9", "must be in [1, 100], got 0.9")])
def test_bad_limits_name_the_flag(capsys: pytest.CaptureFixture[str], flag: str, value: str,
                                  fragment: str) -> None:
    assert_bad(*run(capsys, *PLAN, flag, value), flag, fragment)


# The plan's flags without --deadline (SMALL's first two items)
NO_DEADLINE = ["plan", "--workload", "cnn-digits", *SMALL[2:]]


@pytest.mark.parametrize(("deadline", "slack", "fragments"), [
    ("30000000", [], ("must be in [1, 25228800] s", "--deadline-slack 1.25", "got 30000000")),
    ("25228800.001", [], ("[1, 25228800] s", "got 25228800.001")),
    ("15768001", ["--deadline-slack", "2"], ("[1, 15768000] s", "--deadline-slack 2")),
    ("0", [], ("[1, 25228800] s", "got 0")),
    ("nan", [], ("[1, 25228800] s", "got nan"))])
def test_a_deadline_whose_limit_passes_a_year_names_the_flag_and_its_range(
        capsys: pytest.CaptureFixture[str], deadline: str, slack: list[str],
        fragments: tuple[str, ...]) -> None:
    # before: "argument --workload: plan field 'limits.deadline_s'", after the search
    assert_bad(*run(capsys, *NO_DEADLINE, "--deadline", deadline, *slack), "--deadline",
               *fragments)


@pytest.mark.parametrize(("slack", "largest"), [(1.25, 25228800.0), (2.0, 15768000.0),
                                                 (1.3, 24258461.538)])
def test_the_largest_deadline_the_door_names_makes_a_plan(
        capsys: pytest.CaptureFixture[str], slack: float, largest: float) -> None:
    assert max_deadline_s(slack) == largest
    code, document, _ = run(capsys, *NO_DEADLINE, "--deadline", f"{largest:.15g}",
                            "--deadline-slack", f"{slack:g}")
    assert code == 0, document
    assert 0.999 * MAX_DEADLINE_S < document["plan"]["limits"]["deadline_s"] <= MAX_DEADLINE_S
