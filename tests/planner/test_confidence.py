"""A plan says how far its prediction can be trusted: each profile's coefficients carry their
provenance, and the plan a confidence section with a time and cost range derived from it
(planner/model/confidence.py, planner/model/inputs/provenance.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasdl.contract.plan import Plan
from planner.commands.cli import main
from planner.fit.fit_files import FitRequest, run_fit
from planner.model.confidence import (
    MEASURED_BAND,
    PROVISIONAL_BAND,
    assess,
    ranges,
    time_band,
)
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import (
    ProfileError,
    WorkloadProfile,
    known_workloads,
    load_platform,
    load_prices,
    load_workload,
)
from planner.model.inputs.provenance import (
    KINDS,
    PLATFORM_GROUPS,
    WORKLOAD_GROUPS,
    parse_provenance,
)
from planner.search.searches import Choice, exact
from tests.planner.fit_samples import train_records, transfer_records, write

# a small grid (M <= 2048 MB): the search stays well under a second
PLAN_ARGS = ("--deadline", "600", "--max-global-batch", "64", "--epochs", "2", "--max-memory",
             "2048")
GROUPS = ("workload.compute", "platform.transfer", "platform.cold_start")


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(["plan", *argv, "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0, document
    return dict(document)


def test_a_provisional_plan_names_its_inputs_and_a_time_range(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    document = plan_json(capsys, "--workload", "bert-mini-textset", *PLAN_ARGS,
                         "--out", str(out))
    confidence = document["confidence"]
    assert {"workload.compute", "workload.memory"} <= set(confidence["provisional"])
    assert "workload.compute" in confidence["not_measured"]
    point = document["plan"]["prediction"]["time_s"]
    low, high = confidence["time_s"]["low"], confidence["time_s"]["high"]
    assert 0 < low < point < high
    cost = document["plan"]["prediction"]["cost_usd"]
    assert confidence["cost_usd"]["low"] <= cost <= confidence["cost_usd"]["high"]
    # the file carries it too, and the contract reads the plan and drops it
    written = json.loads(out.read_text())
    assert written["confidence"] == confidence
    assert "confidence" not in Plan.load(out).to_dict()
    # the printed plan says so first
    assert main(["plan", "--workload", "bert-mini-textset", *PLAN_ARGS]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("PROVISIONAL prediction: workload.compute")
    assert any(line.strip().startswith("likely range: time") for line in lines[:8])


def test_a_measured_plan_prints_no_provisional_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--workload", "cnn-digits", *PLAN_ARGS]) == 0
    assert capsys.readouterr().out.startswith("Plan for cnn-digits")


def _problem(workload: WorkloadProfile, channel: str = "s3") -> Problem:
    return Problem(workload=workload, platform=load_platform(channel), prices=load_prices(),
                   epochs=2, deadline_s=600.0, max_global_batch=64)


def _choice(problem: Problem) -> Choice:
    choice = exact(problem).choice
    assert choice is not None
    return choice


@pytest.mark.parametrize("channel", ["s3", "valkey"])
def test_the_range_narrows_as_the_inputs_are_measured(channel: str) -> None:
    """One plan (same point prediction), its workload's provenance from provisional to
    measured on Lambda: every step narrows the time range."""
    measured = load_workload("cnn-digits")
    problem = _problem(measured, channel)
    choice = _choice(problem)
    widths = []
    for provenance in ({"kind": "provisional"}, {"kind": "chosen"}, {"kind": "paper"},
                       {"kind": "measured", "platform": "aws-lambda-x86_64",
                        "date": "2026-11-28"}):
        workload = replace(measured, provenance=parse_provenance(provenance, WORKLOAD_GROUPS))
        confidence = assess(replace(problem, workload=workload), choice)
        assert confidence.time_s == choice.time_s  # the point prediction is the model's
        widths.append(confidence.time_range[1] - confidence.time_range[0])
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]


def test_a_memory_outside_the_profile_is_extrapolated_and_wider() -> None:
    workload = load_workload("cnn-digits")
    problem = _problem(workload)
    choice = _choice(problem)
    inside = assess(replace(problem, workload=replace(
        workload, profiled_memory_mb=[128.0, 10240.0])), choice)
    outside = assess(replace(problem, workload=replace(
        workload, profiled_memory_mb=[choice.memory_mb + 128.0, 10240.0])), choice)
    assert "workload.compute" in outside.extrapolated and not inside.extrapolated
    assert outside.time_band > inside.time_band
    assert outside.warnings and "outside the memories" in outside.warnings[0]


def test_a_profile_without_provenance_counts_as_provisional() -> None:
    data = load_workload("cnn-digits").to_dict()
    del data["provenance"]
    old = WorkloadProfile.from_dict(data)
    assert "provenance" not in old.to_dict()  # the file stays as it was
    problem = _problem(old)
    confidence = assess(problem, _choice(problem))
    assert {"workload.compute", "workload.memory"} <= set(confidence.named("provisional"))
    assert confidence.to_dict()["inputs"]["workload.compute"]["relative_error"] == (
        PROVISIONAL_BAND)


@pytest.mark.parametrize(("provenance", "field"), [
    ({"kind": "guessed"}, "provenance.kind"),
    ({"kind": "measured", "platform": "aws-lambda"}, "provenance.date"),
    ({"kind": "measured", "date": "2026-11-28"}, "provenance.platform"),
    ({"kind": "measured", "platform": "aws-lambda", "date": "28.11.2026"}, "provenance.date"),
    ({"kind": "paper", "date": "2026-11-28"}, "provenance.platform"),
    ({"kind": "paper", "max_relative_error": -0.1}, "provenance.max_relative_error"),
    ({"compute": {"kind": "paper"}}, "provenance.memory"),
    ({"compute": {"kind": "paper"}, "memory": {"kind": "paper"}, "cpu": {"kind": "paper"}},
     "provenance.cpu"),
    ({"compute": {"kind": "paper", "source": "x"}, "memory": {"kind": "paper"}},
     "provenance.compute.source"),
    ("measured", "provenance"),
])
def test_bad_provenance_is_named(provenance: object, field: str) -> None:
    data = {**load_workload("cnn-digits").to_dict(), "provenance": provenance}
    with pytest.raises(ProfileError) as error:
        WorkloadProfile.from_dict(data)
    assert error.value.field == field


def test_every_shipped_profile_records_its_provenance_as_its_notes_say() -> None:
    for name in known_workloads():
        workload = load_workload(name)
        assert set(workload.provenance) == set(WORKLOAD_GROUPS), name
        provisional = workload.provenance["compute"].kind == "provisional"
        assert provisional == ("PROVISIONAL" in workload.notes), name
        if "k, c are not in the paper" in workload.notes:
            assert workload.provenance["memory"].kind == "chosen", name
    for channel in ("s3", "valkey"):
        platform = load_platform(channel)
        assert set(platform.provenance) == set(PLATFORM_GROUPS)
        assert (platform.provenance["transfer"].kind == "provisional") == (
            "ASSUMPTION" in platform.source)
    assert all(entry.kind in KINDS for entry in load_workload("cnn-digits").provenance.values())


def test_the_fit_writes_measured_provenance_with_its_quality(tmp_path: Path) -> None:
    samples = write(tmp_path / "all.jsonl", train_records(0.01) + transfer_records(0.01))
    run_fit(FitRequest(samples=[samples], out=str(tmp_path / "fit.json"), name="fitted",
                       dataset_samples=50000, dataset_mb=146.48, measured_on="local-emulation"))
    workload = json.loads((tmp_path / "fit-workload.json").read_text())["provenance"]
    platform = json.loads((tmp_path / "fit-platform.json").read_text())["provenance"]
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    for entry in (workload["compute"], workload["memory"], platform["transfer"]):
        assert entry["kind"] == "measured" and entry["platform"] == "local-emulation"
        assert entry["date"] == today and 0 <= entry["max_relative_error"] < 0.1
        assert entry["r_squared"] > 0.9
    assert platform["cold_start"]["kind"] == "chosen"  # the defaults, not measured here


bands = st.floats(0.0, 5.0, allow_nan=False)
seconds = st.floats(0.0, 1e4, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(compute=bands, transfer=bands, cold=bands, cold_s=seconds, load_s=seconds,
       iteration_s=st.floats(1e-3, 100.0), train_share=st.floats(0.0, 1.5),
       iterations=st.floats(0.0, 1e5), segments=st.integers(1, 50),
       cost=st.floats(1e-6, 1e4), scaled_share=st.floats(0.0, 1.0), wider=bands)
def test_low_point_high_for_any_relative_errors(
        compute: float, transfer: float, cold: float, cold_s: float, load_s: float,
        iteration_s: float, train_share: float, iterations: float, segments: int,
        cost: float, scaled_share: float, wider: float) -> None:
    breakdown = {"cold_start_s": cold_s, "load_s": load_s, "checkpoint_s": load_s / 2,
                 "iteration_s": iteration_s, "train_aggregator_s": iteration_s * train_share,
                 "train_non_aggregator_s": 0.0}
    time_s = cold_s + segments * 1.5 * load_s + iterations * iteration_s
    given_bands = {"workload.compute": compute, "platform.transfer": transfer,
                   "platform.cold_start": cold}
    delta = time_band(given_bands, breakdown, time_s, segments)
    assert 0.0 <= delta <= max(compute, transfer, cold) + 1e-9
    (low_t, high_t), (low_c, high_c) = ranges(time_s, cost, cost * scaled_share, delta)
    assert 0.0 <= low_t <= time_s <= high_t
    assert 0.0 <= low_c <= cost * (1 + 1e-12) and cost <= high_c * (1 + 1e-12)
    # a wider band of any input never narrows the range
    for name in GROUPS:
        widened = time_band({**given_bands, name: given_bands[name] + wider}, breakdown,
                            time_s, segments)
        assert widened >= delta - 1e-12
    assert MEASURED_BAND < PROVISIONAL_BAND
