"""A chosen configuration's prediction as the plan contract carries it (fasdl.contract.prediction):
what ``planner plan`` writes, and what an adaptive run's re-plan writes into the plan it
changes to (planner/adapt/run_step.py)."""

from __future__ import annotations

from fasdl.contract.plan import Prediction
from fasdl.contract.prediction import LOAD_BEARING
from planner.model.inputs.problem import Problem
from planner.search.searches import Choice


def prediction(choice: Choice, problem: Problem) -> Prediction:
    """The choice's prediction: the figures the stack and the guard act on as typed fields
    (fasdl.contract.prediction), the rest of the model's breakdown for the reader; a charged
    ramp with the platform's numbers it was charged by."""
    breakdown = {name: round(value, 6) for name, value in choice.breakdown.items()}
    rest = {name: value for name, value in breakdown.items() if name not in LOAD_BEARING}
    ramp_s = breakdown.get("cache_ramp_s")
    platform = problem.platform
    return Prediction(time_s=round(choice.time_s, 3), cost_usd=round(choice.cost_usd, 6),
                      lambda_compute_usd=breakdown["lambda_compute_usd"],
                      cache_ecpu_per_s_peak=breakdown.get("cache_ecpu_per_s_peak"),
                      cache_ecpu_per_s_mean=breakdown.get("cache_ecpu_per_s_mean"),
                      cache_ramp_s=ramp_s,
                      cache_fresh_ecpu_per_s=platform.cache_fresh_ecpu_per_s if ramp_s else None,
                      cache_ramp_doubling_s=platform.cache_ramp_doubling_s if ramp_s else None,
                      cache_slot_ecpu_per_s=(platform.cache_slot_ecpu_per_s
                                             if "cache_ecpu_per_s_peak" in breakdown else None),
                      cache_wait_s=breakdown.get("cache_wait_s") or None,  # 0: it ramps
                      breakdown=rest)
