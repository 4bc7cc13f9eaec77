"""``planner plan`` writes the guards' limits (fasdl.contract.limits): by default the planning
deadline x 1.25 and the predicted cost x 1.5, priced with the plan's Lambda prices;
``--budget-usd`` and ``--deadline-slack`` change them, and bad values name the flag."""

from __future__ import annotations

import pytest

from fasdl.contract.plan import Plan
from planner.model.profiles import load_prices
from tests.planner.test_cli_bad_inputs import assert_bad, run
from tests.planner.test_cli_inputs import SMALL

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
