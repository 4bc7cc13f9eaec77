"""Deadline and budget guards (fasdl.run.guards), the measured figures (fasdl.run.usage) and
the plan's limits (fasdl.contract.limits): the arithmetic on its own, then the trigger and
finalize handlers against an in-memory S3 (moto) through a stop and a resume. The same stop
through the synthesized state machine is tests/local/run/test_run_guards.py."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from fasdl.contract.keys import manifest_key
from fasdl.contract.limits import BudgetExceeded, DeadlineExceeded, Limits, default_limits
from fasdl.contract.plan import Plan, PlanError, Prediction
from fasdl.contract.settings import Settings
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.run import guards, usage
from fasdl.run.checkpoint import commit_manifest, put_objects
from fasdl.run.run_state import RunStateError
from tests.lambda_context import FakeLambdaContext
from tests.runtime.conftest import RESULTS
from tests.runtime.handler_helpers import (  # s3_env, s3_objects: PLAN's S3 and dataset
    PLAN,
    finalize,
    read_json,
    s3_env,  # noqa: F401
    s3_objects,  # noqa: F401
    start,
    trigger,
)

PRICE_GB_S, PRICE_REQUEST = 1.66667e-05, 2e-07
LIMITS = Limits(deadline_s=3600.0, budget_usd=0.001, lambda_usd_per_gb_s=PRICE_GB_S,
                lambda_usd_per_request=PRICE_REQUEST)
# 10 iterations in 2 segments of 5; predicted 100 s and $0.002, of which $0.0015 Lambda
GUARDED = dataclasses.replace(
    PLAN, training=dataclasses.replace(PLAN.training, segment_iterations=5), limits=LIMITS,
    prediction=Prediction(time_s=100.0, cost_usd=0.002, lambda_compute_usd=0.0015))


def totals(*, started_at: float = 1000.0, worker_gb_s: float = 0.0,
           requests: int = 0) -> dict[str, float]:
    return {**usage.new_usage(started_at), "worker_gb_s": worker_gb_s,
            "worker_requests": requests}


# ---- arithmetic ------------------------------------------------------------------------------
def test_next_segment_is_the_prediction_scaled_by_the_measured_ratio() -> None:
    # half the run done in 60 s against 50 s predicted: ratio 1.2, the next quarter 30 s
    time = guards.project(60.0, 100.0, done=5, following=2, total=10)
    assert time.ratio == pytest.approx(1.2)
    assert time.next_segment == pytest.approx(100.0 * 2 / 10 * 1.2)
    assert time.at_end == pytest.approx(60.0 + 24.0)
    # no prediction: the pace so far; nothing done yet: nothing to scale
    assert guards.project(60.0, None, done=5, following=5, total=10).at_end == 120.0
    assert guards.project(7.0, 100.0, done=0, following=5, total=10).at_end == 7.0


def test_budget_counts_measured_lambda_and_the_unmeasured_rest_pro_rata() -> None:
    spent = totals(worker_gb_s=30.0, requests=4)
    lambda_part = 30.0 * PRICE_GB_S + 4 * PRICE_REQUEST
    assert usage.lambda_usd(spent, LIMITS) == pytest.approx(lambda_part)
    # $0.0005 of the prediction is not Lambda compute: half of it for half the iterations
    assert guards.cost_so_far(spent, GUARDED, LIMITS, done=5) == pytest.approx(
        lambda_part + 0.00025)


def test_the_guard_reads_the_typed_lambda_share_as_the_plan_file_carries_it() -> None:
    """prediction.lambda_compute_usd (in plan.json inside breakdown, fasdl.contract.prediction)
    is what separates measured Lambda from the estimated rest; without it the plan is refused,
    never read as 0 (which would count the whole prediction as non-Lambda)."""
    wire = GUARDED.to_dict()
    assert wire["prediction"]["breakdown"] == {"lambda_compute_usd": 0.0015}
    loaded = Plan.from_dict(wire)
    assert loaded.prediction is not None and loaded.prediction.lambda_compute_usd == 0.0015
    assert usage.predicted_other_usd(loaded, done=10) == pytest.approx(0.0005)
    raised = dataclasses.replace(loaded, prediction=dataclasses.replace(
        loaded.prediction, lambda_compute_usd=0.0))  # all of it unmeasured now
    assert usage.predicted_other_usd(raised, done=10) == pytest.approx(0.002)
    assert usage.measured(totals(), 1000.0, loaded, LIMITS)["predicted_lambda_usd"] == 0.0015
    wire["prediction"]["breakdown"] = {"lambda_usd": 0.0015}  # renamed: refused by name
    with pytest.raises(PlanError, match=r"prediction\.breakdown\.lambda_compute_usd.*missing"):
        Plan.from_dict(wire)


def test_check_stops_before_a_segment_that_would_pass_a_limit() -> None:
    cheap = totals(worker_gb_s=10.0, requests=4)  # $0.00042 so far: $0.00084 at the end
    guards.check(GUARDED, LIMITS, cheap, now=1040.0, done=5, following=5)
    with pytest.raises(BudgetExceeded, match=r"limits.budget_usd \$0.001.*checkpoint is kept"):
        guards.check(GUARDED, LIMITS, totals(worker_gb_s=40.0, requests=4), now=1040.0,
                     done=5, following=5)
    slow = dataclasses.replace(LIMITS, deadline_s=70.0)  # 40 s so far + 40 s > 70 s
    with pytest.raises(DeadlineExceeded, match=r"40.0 s so far \+ 40.0 s .*ratio so far"):
        guards.check(GUARDED, slow, cheap, now=1040.0, done=5, following=5)
    # the last segment done, no limits, or a run state from before runs measured: no check
    guards.check(GUARDED, slow, cheap, now=1040.0, done=10, following=0)
    guards.check(GUARDED, None, cheap, now=1e9, done=5, following=5)
    guards.check(GUARDED, slow, None, now=1e9, done=5, following=5)


def test_after_an_adaptive_change_the_pace_is_measured_since_the_change() -> None:
    """The plan after a change predicts the new configuration (100 s for the run, 10 s per
    iteration); the run took 150 s for its first 5 iterations at the old one. Measured
    since the change (2 iterations in 24 s: ratio 1.2) the next 2 take 24 s; before any
    has run, the ratio at the change (3.0) holds. The whole run's ratio would read the
    old configuration's seconds against the new prediction and stop a run that keeps its
    deadline."""
    since = guards.Since(iteration=5, seconds=150.0, usd=0.0, ratio_s=3.0, ratio_usd=1.0)
    at_change = guards.project_since(150.0, 100.0, done=5, following=2, total=10,
                                     since=since, usd=False)
    assert at_change.next_segment == pytest.approx(100.0 * 2 / 10 * 3.0)
    later = guards.project_since(174.0, 100.0, done=7, following=2, total=10, since=since,
                                 usd=False)
    assert later.ratio == pytest.approx(1.2) and later.next_segment == pytest.approx(24.0)
    deadline = dataclasses.replace(LIMITS, deadline_s=200.0, budget_usd=1.0)
    run = {"adaptive": {"since": 1, "pending": None, "changes": 1, "since_iteration": 5,
                        "since_s": 150.0, "since_usd": 0.0, "ratio_s": 3.0,
                        "ratio_usd": 1.0}}
    guards.check(GUARDED, deadline, totals(), now=1174.0, done=7, following=2,
                 since=guards.since_of(run))  # 174 + 24 = 198 s: it keeps the deadline
    with pytest.raises(DeadlineExceeded):  # 174 s against 70 s predicted: ratio 2.5
        guards.check(GUARDED, deadline, totals(), now=1174.0, done=7, following=2)
    assert guards.since_of({"adaptive": {"since": 0, "pending": None, "changes": 0}}) is None
    with pytest.raises(PlanError, match=r"run\.adaptive\.ratio_s"):
        guards.since_of({"adaptive": {**run["adaptive"], "ratio_s": None}})


def test_a_fresh_caches_ramp_is_charged_to_the_first_segment() -> None:
    """Planned 100 s of which a 30 s ramp (the first iterations, planner cache_ramp.py): a run
    that took 65 s for its first half is on pace (30 + 70/2), and its second half is 35 s; pro
    rata it would read 1.3x slow and project 65 s, and a deadline of 110 s would stop it."""
    ramped = dataclasses.replace(GUARDED, prediction=Prediction(
        time_s=100.0, cost_usd=0.002, lambda_compute_usd=0.0015, cache_ramp_s=30.0,
        cache_fresh_ecpu_per_s=30_000.0, cache_ramp_doubling_s=150.0))
    assert guards.first_segment_fronts(ramped) == (30.0, pytest.approx(0.0015 * 0.3))
    assert guards.first_segment_fronts(GUARDED) == (0.0, 0.0)
    # a plan that waits for its cache instead: the wait's seconds, no Lambda dollars
    waits = dataclasses.replace(GUARDED, prediction=Prediction(
        time_s=3_700.0, cost_usd=0.002, lambda_compute_usd=0.0015, cache_wait_s=3_600.0))
    assert guards.first_segment_fronts(waits) == (3_600.0, 0.0)
    time = guards.project(65.0, 100.0, done=5, following=5, total=10, front=30.0)
    assert time.ratio == pytest.approx(1.0) and time.next_segment == pytest.approx(35.0)
    deadline = dataclasses.replace(LIMITS, deadline_s=110.0, budget_usd=1.0)
    cheap = totals(worker_gb_s=10.0, requests=4)
    guards.check(ramped, deadline, cheap, now=1065.0, done=5, following=5)
    with pytest.raises(DeadlineExceeded):  # the same run judged without the ramp
        guards.check(dataclasses.replace(GUARDED, limits=deadline), deadline, cheap,
                     now=1065.0, done=5, following=5)


def test_raised_limits_cover_the_whole_run_at_the_pace_so_far() -> None:
    spent = totals(worker_gb_s=40.0, requests=4)
    raised = guards.raised_limits(GUARDED, LIMITS, spent, now=1040.0, done=5)
    whole = guards.cost_so_far(spent, GUARDED, LIMITS, 5) * 2
    assert raised["budget_usd"] == pytest.approx(1.25 * whole, rel=1e-3)
    assert raised["deadline_s"] == LIMITS.deadline_s  # 80 s projected: never below the limit


def test_billed_duration_rounds_up_to_the_millisecond() -> None:
    assert usage.billed_ms(0.0011) == 2 and usage.billed_ms(2.0) == 2000
    assert usage.gb_s(2000, 512) == 1.0
    results = [{"invocation": usage.invocation_record(1.5, 2048)}, {"worker": 1}]
    assert usage.results_usage(results) == (3.0, 1)  # a result without a record: not counted


def test_limits_are_validated_naming_the_field_and_range() -> None:
    data = GUARDED.to_dict()
    assert Plan.from_dict(data).limits == LIMITS
    for name, value, message in (("budget_usd", 0, r"limits.budget_usd.*\(0.0, "),
                                 ("deadline_s", -5, r"limits.deadline_s.*\(0.0, "),
                                 ("lambda_usd_per_gb_s", "x", "limits.lambda_usd_per_gb_s")):
        with pytest.raises(PlanError, match=message):
            Plan.from_dict({**data, "limits": {**data["limits"], name: value}})
    with pytest.raises(PlanError, match=r"limits\.budget.*did you mean .budget_usd."):
        Plan.from_dict({**data, "limits": {**data["limits"], "budget": 1}})
    made = default_limits(planning_deadline_s=900.0, predicted_cost_usd=0.2,
                          lambda_usd_per_gb_s=PRICE_GB_S, lambda_usd_per_request=PRICE_REQUEST)
    assert (made.deadline_s, made.budget_usd) == (1125.0, pytest.approx(0.3))
    with pytest.raises(PlanError, match=r"--deadline-slack.*\[1.0, 100.0\]"):
        default_limits(planning_deadline_s=900.0, predicted_cost_usd=0.2, deadline_slack=0.5,
                       lambda_usd_per_gb_s=PRICE_GB_S, lambda_usd_per_request=PRICE_REQUEST)


# ---- through the handlers --------------------------------------------------------------------
def _segment_results(s3: Any, run_id: str, index: int, seconds: float) -> None:
    """What the 4 workers of segment ``index`` write: each billed ``seconds`` at 1024 MB."""
    settings = Settings.from_env()
    for worker in range(4):
        s3.put_object(Bucket=RESULTS, Key=settings.segment_result_key(run_id, index, 0, worker),
                      Body=json.dumps({"worker": worker, "iterations_done": 5,
                                       usage.INVOCATION_FIELD:
                                           usage.invocation_record(seconds, 1024)}))


def _checkpoint(s3: Any, run_id: str, iteration: int, epoch: int) -> None:
    store = S3Channel(RESULTS, "runs/", client=s3)
    for worker in range(4):
        put_objects(store, run_id, iteration, epoch, worker, {f"w{worker}": b"m"})
    commit_manifest(store, run_id, iteration, epoch, workers=4, timeout_s=5.0)


def test_the_summary_estimates_what_is_not_measured_and_says_so() -> None:
    spent = totals(worker_gb_s=30.0, requests=4)
    whole = usage.measured(spent, 1060.0, GUARDED, LIMITS)
    assert whole["estimated_other_usd"] == pytest.approx(0.0005)  # $0.002 - $0.0015 Lambda
    assert "not measured" in whole["estimated_other_basis"]
    half = usage.measured(spent, 1060.0, GUARDED, LIMITS, done=5)
    assert half["estimated_other_usd"] == pytest.approx(0.00025)
    assert half["measured_lambda_usd"] == whole["measured_lambda_usd"]


def test_a_budget_stop_keeps_the_checkpoint_and_resumes_with_new_limits(s3: Any) -> None:
    run = start({"run_id": "guarded", "plan": GUARDED.to_dict()})
    _segment_results(s3, "guarded", 0, 20.0)  # 80 GB-s: $0.00133, past $0.001 already
    _checkpoint(s3, "guarded", 5, run["segment"]["epoch"])
    with pytest.raises(BudgetExceeded, match="before iterations 5-10 of 10"):
        trigger.handler({"action": "next", "run": run}, FakeLambdaContext())
    assert read_json(s3, "runs/guarded/fence.json")["epoch"] == run["segment"]["epoch"]  # no new

    execution = "arn:aws:states:us-east-1:1:execution:m:guarded"
    error = {"Error": "BudgetExceeded", "Cause": "stopped"}
    finalize.handler({"action": "failed", "execution": execution,
                      "state": {"run": run, "error": error}}, FakeLambdaContext())
    record = read_json(s3, "runs/guarded/failure.json")
    assert record["status"] == "BUDGET_EXCEEDED"
    assert record["checkpoint_key"] == "runs/" + manifest_key("guarded", 5,
                                                              run["segment"]["epoch"])
    assert record["measured"]["predicted_cost_usd"] == 0.002
    assert record["measured"]["billed_gb_s"]["worker"] == 80.0  # the segment it stopped after
    resume = record["resume"]
    assert "--state-machine-arn arn:aws:states:us-east-1:1:stateMachine:m" in resume[
        "command"]
    following = resume["input"]["resume"]["segment"]
    assert (following["start_iteration"], following["iterations"],
            following["resume_epoch"]) == (5, 5, run["segment"]["epoch"])
    assert resume["input"]["limits"]["budget_usd"] > 2 * 0.00133

    stopped = resume["input"]["resume"]["usage"]
    stopped[usage.STOPPED_AT] -= 100.0  # resumed 100 s after the stop: not the run's time
    resumed = start(resume["input"], "exec-2")  # the second half, under the new limits
    assert resumed["limits"] == resume["input"]["limits"]
    assert usage.STOPPED_AT not in resumed["usage"]
    assert resumed["usage"]["started_at"] >= stopped["started_at"] + 100.0
    _segment_results(s3, "guarded", 1, 20.0)
    done = trigger.handler({"action": "next", "run": resumed}, FakeLambdaContext())
    assert done["done"] and done["usage"]["worker_requests"] == 8  # both segments, once each
    assert done["usage"]["worker_gb_s"] == pytest.approx(160.0)


@pytest.mark.parametrize(("limits", "message"), [
    ({"budget": 1}, r"'limits.budget'.*did you mean 'budget_usd'"),
    ({"deadline_s": 0}, r"'limits.deadline_s': must be a number > 0"),
    ([], r"'limits': must be an object")])
def test_input_limits_are_checked_naming_the_field(s3: Any, limits: object,
                                                   message: str) -> None:
    with pytest.raises(RunStateError, match=message):
        start({"run_id": "bad-limits", "plan": GUARDED.to_dict(), "limits": limits})


def test_input_limits_replace_the_plans_in_the_frozen_plan(s3: Any) -> None:
    start({"run_id": "roomy", "plan": GUARDED.to_dict(), "limits": {"budget_usd": 5}})
    frozen = Plan.from_dict(read_json(s3, "runs/roomy/plan.json"))
    assert frozen.limits == dataclasses.replace(LIMITS, budget_usd=5)
