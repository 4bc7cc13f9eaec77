"""The local run report's cost line and verdict (local/run/report.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fasdl.contract.plan import Plan
from infra.settings import DEFAULT_PLAN_PATH
from local.lambda_.invocation import Invocation
from local.run.report import lambda_cost_usd, verdict
from planner.model.inputs.profiles import load_prices


def _invocation(duration_s: float, memory_mb: int) -> Invocation:
    return Invocation("Worker", "id", b"{}", None, None, 0.0, duration_s, None,
                      memory_mb=memory_mb, cold_start=False)


def test_invocations_are_priced_as_lambda_bills_them() -> None:
    plan = Plan.load(DEFAULT_PLAN_PATH)
    prices = load_prices(plan.deployment.region)
    invocations = [_invocation(1.0, 1024), _invocation(2.0, 512)]
    expected = 2048 * prices.lambda_mb_s(plan.deployment.arch) + 2 * prices.lambda_request
    assert lambda_cost_usd(plan, invocations) == pytest.approx(expected, abs=1e-6)
    unpriced = Plan.from_dict({**plan.to_dict(), "deployment": {
        **plan.to_dict()["deployment"], "region": "ap-southeast-5"}})
    assert dataclasses.asdict(unpriced.deployment)["region"] == "ap-southeast-5"
    assert lambda_cost_usd(unpriced, invocations) is None  # no shipped prices: not guessed


@pytest.mark.parametrize(("report", "expected"), [
    ({"status": "SUCCEEDED", "final_accuracy": 0.9642, "measured_s": 100.0,
      "predicted_s": 194.3}, "verdict: SUCCEEDED, test accuracy 0.964, 0.51x the predicted "
                             "time (within 1.5x)"),
    ({"status": "FAILED", "final_accuracy": None, "measured_s": 300.0, "predicted_s": 100.0},
     "verdict: FAILED, 3.00x the predicted time (over 1.5x: see time split)"),
    ({"status": "SUCCEEDED", "final_accuracy": None, "measured_s": 1.0, "predicted_s": None},
     "verdict: SUCCEEDED")])
def test_the_verdict_says_status_metric_and_time_ratio(report: dict[str, Any],
                                                       expected: str) -> None:
    assert verdict(report) == expected
