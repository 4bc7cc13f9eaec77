"""The plan's load-bearing fields (issue 40): ``Prediction.lambda_compute_usd`` and the cache's
ECPU/s figures, the ``quotas`` section and the ``run`` owner are typed contract fields, checked
like every other one (a bad value names the field and the allowed range); ``prediction.breakdown``
and ``provenance`` are informational. The JSON layout of the prediction's figures is unchanged
(inside ``breakdown``), so plans already written load, and write, byte for byte."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from fasdl.contract.cache import MAX_CACHE_WAIT_S
from fasdl.contract.lambda_quotas import PlanQuotas
from fasdl.contract.plan import Plan, PlanError
from fasdl.contract.prediction import Prediction
from fasdl.contract.run_owner import RunOwner
from tests.runtime.handler_helpers import PLAN

DEFAULT_PLAN = Path(__file__).resolve().parents[2] / "infra" / "default_plan.json"

VALKEY_PLAN = "tests/infra/plans/valkey_arm64.json"


def _valkey() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(VALKEY_PLAN).read_text())
    return data


def _refused(data: dict[str, Any]) -> PlanError:
    with pytest.raises(PlanError) as raised:
        Plan.from_dict(data)
    return raised.value


def test_the_typed_figures_load_from_and_write_back_to_the_breakdown() -> None:
    data = _valkey()
    plan = Plan.from_dict(data)
    prediction = plan.prediction
    assert prediction is not None
    assert (prediction.lambda_compute_usd, prediction.cache_ecpu_per_s_peak,
            prediction.cache_ecpu_per_s_mean) == (1.170585, 710504.448, 423248.208047)
    assert not {"lambda_compute_usd", "cache_ecpu_per_s_peak"} & set(prediction.breakdown)
    assert plan.to_dict()["prediction"]["breakdown"] == data["prediction"]["breakdown"]
    assert Plan.from_json(plan.to_compact_json()) == plan


@pytest.mark.parametrize(("name", "value", "bound"), [
    ("lambda_compute_usd", -0.1, "[0.0, 6.442069]"),
    ("lambda_compute_usd", 7.0, "[0.0, 6.442069]"),  # above the whole prediction
    ("lambda_compute_usd", "cheap", "must be a number"),
    ("cache_ecpu_per_s_peak", -1.0, "[0.0, 1000000000000.0]"),
    ("cache_ecpu_per_s_mean", -5.0, "[0.0, 1000000000000.0]"),
    ("cache_ecpu_per_s_mean", float("nan"), "[0.0, 1000000000000.0]"),
])
def test_a_bad_figure_names_the_field_and_its_range(name: str, value: object,
                                                    bound: str) -> None:
    data = _valkey()
    data["prediction"]["breakdown"][name] = value
    error = _refused(data)
    assert error.field == f"prediction.breakdown.{name}" and bound in str(error)


@pytest.mark.parametrize("name", ["lambda_compute_usd", "cache_ecpu_per_s_peak",
                                  "cache_ecpu_per_s_mean"])
def test_a_missing_figure_is_refused_never_read_as_zero(name: str) -> None:
    """An older or hand-written plan without a figure: refused, naming it and what to do."""
    data = _valkey()
    del data["prediction"]["breakdown"][name]
    error = _refused(data)
    assert error.field == f"prediction.breakdown.{name}" and "is missing" in str(error)


def test_an_s3_plan_needs_no_cache_figures_and_a_prediction_stays_optional() -> None:
    assert PLAN.deployment.channel == "s3"
    data = PLAN.to_dict()
    data["prediction"] = {"time_s": 10.0, "cost_usd": 0.1,
                          "breakdown": {"lambda_compute_usd": 0.1, "upload_s": 1.0}}
    prediction = Plan.from_dict(data).prediction
    assert prediction is not None and not prediction.has_cache_ecpu
    assert prediction.breakdown == {"upload_s": 1.0}
    valkey = _valkey()
    del valkey["prediction"]  # -c workload= drops it: the cache keeps the network estimate
    assert Plan.from_dict(valkey).prediction is None


def test_a_charged_ramp_says_which_ramp_and_only_then() -> None:
    """cache_ramp_s > 0 comes with the fresh rate and doubling interval the relay and the
    guards act on (fasdl.contract.prediction); without a ramp they are refused."""
    data = _valkey()
    breakdown = data["prediction"]["breakdown"]
    breakdown.update(cache_ramp_s=12.5, cache_fresh_ecpu_per_s=30_000.0,
                     cache_ramp_doubling_s=150.0)
    plan = Plan.from_dict(data)
    assert plan.prediction is not None and plan.prediction.charges_cache_ramp
    assert plan.prediction.cache_ramp_doubling_s == 150.0
    assert plan.to_dict()["prediction"]["breakdown"] == breakdown
    for name in ("cache_fresh_ecpu_per_s", "cache_ramp_doubling_s"):
        missing = json.loads(json.dumps(data))
        del missing["prediction"]["breakdown"][name]
        error = _refused(missing)
        assert error.field == f"prediction.breakdown.{name}" and "is missing" in str(error)
    zero = json.loads(json.dumps(data))
    zero["prediction"]["breakdown"]["cache_ramp_doubling_s"] = 0.0
    assert "(0.0, 1000000000000.0]" in str(_refused(zero))
    unramped = json.loads(json.dumps(data))
    unramped["prediction"]["breakdown"]["cache_ramp_s"] = 0.0
    error = _refused(unramped)
    assert error.field == "prediction.breakdown.cache_fresh_ecpu_per_s"
    assert "without a ramp charged" in str(error)


def test_a_plan_waits_for_its_cache_or_ramps_never_both() -> None:
    """cache_wait_s (the trigger holds the first segment until the cache is that old): in
    [0, MAX_CACHE_WAIT_S], kept through JSON, refused beside a charged ramp."""
    data = _valkey()
    data["prediction"]["breakdown"]["cache_wait_s"] = 3_600.0
    plan = Plan.from_dict(data)
    assert plan.prediction is not None and plan.prediction.cache_wait_s == 3_600.0
    assert plan.to_dict()["prediction"]["breakdown"]["cache_wait_s"] == 3_600.0
    both = json.loads(json.dumps(data))
    both["prediction"]["breakdown"].update(cache_ramp_s=12.5, cache_fresh_ecpu_per_s=30_000.0,
                                           cache_ramp_doubling_s=150.0)
    error = _refused(both)
    assert error.field == "prediction.breakdown.cache_wait_s" and "or ramps" in str(error)
    too_long = json.loads(json.dumps(data))
    too_long["prediction"]["breakdown"]["cache_wait_s"] = MAX_CACHE_WAIT_S + 1.0
    assert f"[0.0, {MAX_CACHE_WAIT_S}" in str(_refused(too_long))


def test_a_figure_given_as_a_field_and_in_the_breakdown_is_refused() -> None:
    with pytest.raises(PlanError, match="given twice") as raised:
        Prediction(time_s=1.0, cost_usd=1.0, lambda_compute_usd=0.5,
                   breakdown={"lambda_compute_usd": 0.5}).validate()
    assert raised.value.field == "prediction.breakdown.lambda_compute_usd"
    data = _valkey()
    data["prediction"]["lambda_compute_usd"] = 1.0  # its JSON home is the breakdown
    assert _refused(data).field == "prediction.lambda_compute_usd"


def test_quotas_and_run_round_trip_and_are_left_out_when_absent() -> None:
    assert "quotas" not in PLAN.to_dict() and "run" not in PLAN.to_dict()
    quotas = PlanQuotas(max_concurrency=400, max_memory_mb=3008, account_max_memory_mb=3008,
                        account_max_concurrency=400, account="123456789012 us-east-1 2026-11-28")
    plan = Plan.from_dict({**PLAN.to_dict(), "quotas": quotas.to_dict(),
                           "run": {"run_id": "r1", "execution": "exec-1"}})
    assert plan.quotas == quotas and plan.run == RunOwner(run_id="r1", execution="exec-1")
    assert Plan.from_json(plan.to_json()) == plan
    bare = PlanQuotas(max_concurrency=1000, max_memory_mb=10240)
    assert bare.to_dict() == {"max_concurrency": 1000, "max_memory_mb": 10240}


@pytest.mark.parametrize(("section", "field", "value", "bound"), [
    ("quotas", "max_concurrency", 1, "[2, 1000000]"),
    ("quotas", "max_concurrency", "1000", "[2, 1000000]"),
    ("quotas", "max_memory_mb", 10241, "[128, 10240]"),
    ("quotas", "account_max_memory_mb", 100, "[128, 10240]"),
    ("quotas", "account_max_concurrency", 2_000_000, "[2, 1000000]"),
    ("quotas", "account", "x" * 65, "1-64 characters"),
    ("run", "run_id", "../other", "1-128 letters"),
    ("run", "execution", "has space", "0-80 printable characters"),
    ("run", "execution", 7, "0-80 printable characters"),
])
def test_a_bad_quota_or_owner_names_the_field_and_range(section: str, field: str,
                                                        value: object, bound: str) -> None:
    sections = {"quotas": {"max_concurrency": 1000, "max_memory_mb": 10240},
                "run": {"run_id": "r1", "execution": "exec-1"}}
    data = {**PLAN.to_dict(), section: {**sections[section], field: value}}
    error = _refused(data)
    assert error.field == f"{section}.{field}" and bound in str(error), error


def test_quotas_still_in_provenance_are_refused_unless_the_section_is_there() -> None:
    data = PLAN.to_dict()
    data["provenance"] = {**data.get("provenance", {}), "max_concurrency": "200"}
    error = _refused(data)
    assert error.field == "provenance.max_concurrency"
    assert "quotas.max_concurrency" in str(error) and "plan again" in str(error)
    data["quotas"] = {"max_concurrency": 200, "max_memory_mb": 10240}
    assert Plan.from_dict(data).quotas == PlanQuotas(max_concurrency=200, max_memory_mb=10240)


def test_a_plan_moved_to_another_channel_drops_the_prediction_made_for_its_own() -> None:
    """`local run --channel valkey` on an S3 plan (and the suite's synths): the S3 prediction
    has no cache ECPU rates, which a Valkey plan's prediction must carry; moved, the plan
    keeps everything but the prediction, and stays itself on its own channel."""
    planned = dataclasses.replace(Plan.load(DEFAULT_PLAN), prediction=Prediction(
        time_s=1.0, cost_usd=1.0, lambda_compute_usd=0.5))
    assert planned.deployment.channel == "s3"
    moved = planned.on_channel("valkey")
    assert moved.deployment.channel == "valkey" and moved.prediction is None
    assert (moved.workload, moved.training) == (planned.workload, planned.training)
    assert Plan.from_json(moved.to_json()) == moved
    assert planned.on_channel("s3") is planned
    with pytest.raises(PlanError, match="cache_ecpu_per_s_peak"):
        Plan.from_dict({**planned.to_dict(), "deployment": {
            **planned.to_dict()["deployment"], "channel": "valkey"}})


def test_an_adaptive_plan_states_its_policy_and_ceiling_and_older_plans_read_as_before() -> None:
    """training.adaptive and deployment.workers_max (issue 42): written only when set, so a
    plan without them writes byte for byte as before; the ceiling goes into the fingerprint
    the stack checks runs against."""
    data = json.loads(DEFAULT_PLAN.read_text())
    plain = Plan.from_dict(data)
    assert plain.training.adaptive == "off" and plain.deployment.workers_max is None
    assert plain.deployment.ceiling == plain.deployment.workers
    assert "adaptive" not in plain.to_dict()["training"]
    assert "workers_max" not in plain.to_dict()["deployment"]
    assert plain.to_json() == Plan.from_json(plain.to_json()).to_json()
    workers = plain.deployment.workers
    data["training"]["adaptive"] = "cost"
    data["deployment"]["workers_max"] = 4 * workers
    adaptive = Plan.from_dict(data)
    assert adaptive.deployment.ceiling == 4 * workers
    assert adaptive.deployment_fingerprint().split(":")[3] == f"W{workers}-{4 * workers}"
    assert Plan.from_json(adaptive.to_json()) == adaptive


@pytest.mark.parametrize(("section", "field", "value", "message"), [
    ("training", "adaptive", "always", r"training\.adaptive.*off, deadline, cost"),
    ("deployment", "workers_max", 0, r"deployment\.workers_max"),
    ("deployment", "workers_max", 1001, r"deployment\.workers_max"),
])
def test_a_bad_policy_or_ceiling_names_the_field(section: str, field: str, value: object,
                                                 message: str) -> None:
    data = json.loads(DEFAULT_PLAN.read_text())
    data[section][field] = value
    assert _refused(data).field.startswith(f"{section}.{field}")
    with pytest.raises(PlanError, match=message):
        Plan.from_dict(data)
