"""python -m planner calibrate: the refit from runs' per-role measurements (synthetic
summaries: pure logic) and its errors. Calibrate on a real emulated run's report:
tests/local/run/test_run_emulated.py (that file's one run serves both)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.commands.cli import main
from planner.fit.refit import RolePoint, refit_cold_start, refit_compute
from planner.model.inputs.profiles import load_platform, load_workload

TRUE = load_workload("cnn-digits")
OFF = replace(TRUE, a=TRUE.a * 1.3)  # a profile 30 % too slow
PLATFORM = load_platform("s3")


def role(memory_mb: int, batch: int, *, workload: str = "cnn-digits",
         cold_start_s: float | None = None, scale: float = 1.0) -> dict[str, Any]:
    """A role's figures as fasdl.run.role_times writes them, timed by the true profile."""
    return {"workload": workload, "workers": 1, "memory_mb": memory_mb, "batch": batch,
            "invocations": 1, "iterations": 50,
            "compute_s_per_iteration": scale * float(TRUE.train_time(batch, memory_mb)),
            "exchange_s_per_iteration": 0.05, "cold_start_s": cold_start_s,
            "warm_start_s": None, "load_s": 0.3, "billed_s": 10.0}


def summary(path: Path, **roles: dict[str, Any]) -> str:
    path.write_text(json.dumps({"run_id": path.stem, "roles": roles}))
    return str(path)


def write_off_workload(tmp_path: Path) -> str:
    path = tmp_path / "off.json"
    path.write_text(json.dumps(OFF.to_dict()))
    return str(path)


def calibrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["calibrate", *args, "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    return code, json.loads(out[-1]) if out else {}


def points(*roles: tuple[int, int]) -> list[RolePoint]:
    return [RolePoint(f"run roles.{i}", memory, batch, 50,
                      float(TRUE.train_time(batch, memory)), None)
            for i, (memory, batch) in enumerate(roles)]


def test_one_memory_two_batches_refits_a_and_b_at_the_profiles_m() -> None:
    refit = refit_compute(OFF, points((1024, 16), (1024, 48)), "local-emulation")
    new = refit.profile
    assert new.m == OFF.m and refit.kept and refit.kept[0].startswith("m kept")
    for batch in (16, 48, 128):  # the true line at this M, also beyond the runs' batches
        assert float(new.train_time(batch, 1024)) == pytest.approx(
            float(TRUE.train_time(batch, 1024)), rel=1e-4)
    compute = new.provenance["compute"]
    assert compute.kind == "measured" and compute.platform == "local-emulation"
    assert new.provenance["memory"] == TRUE.provenance["memory"]


def test_one_batch_scales_a_only() -> None:
    refit = refit_compute(OFF, points((1024, 32)), "local-emulation")
    assert refit.profile.a == pytest.approx(TRUE.a, rel=1e-4)
    assert (refit.profile.b, refit.profile.m) == (OFF.b, OFF.m)
    assert [item.split(" kept")[0] for item in refit.kept] == ["m", "b"]


def test_two_memories_and_batches_use_the_profilers_fit() -> None:
    shifted = replace(OFF, m=OFF.m * 3, b=OFF.b / 2)  # every coefficient wrong
    grid = [(memory, batch) for memory in (512, 1024, 1536) for batch in (16, 32, 64)]
    refit = refit_compute(shifted, points(*grid), "aws-lambda-x86_64")
    assert refit.kept == ()
    assert refit.quality is not None and refit.quality.max_relative_error < 0.01
    assert float(refit.profile.train_time(48, 768)) == pytest.approx(
        float(TRUE.train_time(48, 768)), rel=0.01)


def test_cold_start_at_one_memory_refits_the_torch_load() -> None:
    cold = [replace(point, cold_start_s=4.0) for point in points((1024, 16))]
    refit = refit_cold_start(PLATFORM, cold, "local-emulation")
    assert float(refit.profile.cold_start_s(1024)) == pytest.approx(4.0, rel=1e-4)
    assert refit.profile.invocation_overhead_s == PLATFORM.invocation_overhead_s
    assert refit.profile.provenance["cold_start"].kind == "measured"
    assert refit.profile.provenance["transfer"] == PLATFORM.provenance["transfer"]


def test_cold_start_at_two_memories_refits_both_terms() -> None:
    truth = replace(PLATFORM, invocation_overhead_s=0.8, torch_load_cpu_s=5.0)
    cold = [replace(point, cold_start_s=float(truth.cold_start_s(point.memory_mb)))
            for point in points((512, 16), (1024, 16))]
    refit = refit_cold_start(PLATFORM, cold, "local-emulation").profile
    assert refit.invocation_overhead_s == pytest.approx(0.8, rel=1e-3)
    assert refit.torch_load_cpu_s == pytest.approx(5.0, rel=1e-3)


def test_cli_prints_old_and_new_error_and_writes_measured_profiles(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = summary(tmp_path / "summary.json", aggregator=role(1024, 16, cold_start_s=3.0),
                  non_aggregator=role(1024, 40))
    out_workload, out_platform = tmp_path / "w.json", tmp_path / "p.json"
    code, found = calibrate(capsys, run, "--workload", write_off_workload(tmp_path),
                            "--platform", "aws-lambda-x86_64-s3", "--measured-on",
                            "local-emulation", "--out-workload", str(out_workload),
                            "--out-platform", str(out_platform))
    assert code == 0
    assert found["total"]["old_error"] == pytest.approx(0.3, abs=1e-3)
    assert abs(found["total"]["new_error"]) < 1e-3
    assert all(abs(row["new_error"]) < 1e-3 for row in found["roles"])
    assert abs(found["roles"][0]["new_cold_start_error"]) < 1e-3
    written = load_workload(str(out_workload))
    assert written.provenance["compute"].platform == "local-emulation"
    assert written.a == pytest.approx(found["workload"]["a"])
    assert json.loads(out_platform.read_text())["provenance"]["cold_start"]["kind"] == "measured"
    main(["calibrate", run, "--workload", write_off_workload(tmp_path), "--platform",
          "aws-lambda-x86_64-s3"])
    text = capsys.readouterr().out
    assert "old prediction" in text and "(+30.0%)" in text and "kept: m kept" in text


def test_a_local_report_json_is_read_through_its_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"status": "SUCCEEDED", "platform": "local-emulation",
                                  "summary": {"roles": {"aggregator": role(1024, 16)}}}))
    code, found = calibrate(capsys, str(report), "--workload", "cnn-digits", "--platform",
                            "aws-lambda-x86_64-s3", "--measured-on", "local-emulation")
    assert code == 0 and abs(found["total"]["old_error"]) < 1e-6
    assert found["measured_on"] == "local-emulation"


@pytest.mark.parametrize("platform", ["local", "local-emulation (aws-lambda-x86_64-s3)", None])
def test_a_local_run_is_not_taken_for_aws_lambda_unless_told(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], platform: str | None) -> None:
    """Issue 43: a local run's report refitted AWS Lambda's coefficients and said nothing (a
    report without a platform predates the field: a local run all the same)."""
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"status": "SUCCEEDED", "summary": {
        "roles": {"aggregator": role(1024, 16)}}, **({"platform": platform} if platform else {})}))
    out = tmp_path / "workload.json"
    code = main(["calibrate", str(report), "--workload", "cnn-digits", "--platform",
                 "aws-lambda-x86_64-s3", "--out-workload", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and not out.exists()
    assert f"the run ran on {platform or 'local'}, not on AWS Lambda" in err
    assert "--measured-on" in err


@pytest.mark.parametrize(("roles", "field"), [
    ({}, "field 'roles' is missing or empty"),
    ({"aggregator": role(1024, 16, workload="mlp-digits")}, "roles.aggregator.workload"),
    ({"aggregator": {**role(1024, 16), "compute_s_per_iteration": None}},
     "roles.aggregator.compute_s_per_iteration"),
    ({"aggregator": {**role(1024, 16), "iterations": 0}}, "roles.aggregator.iterations"),
])
def test_bad_summaries_exit_2_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], roles: dict[str, Any],
        field: str) -> None:
    code, found = calibrate(capsys, summary(tmp_path / "s.json", **roles), "--workload",
                            "cnn-digits", "--platform", "aws-lambda-x86_64-s3")
    assert code == 2 and found["argument"] == "RUN_SUMMARY" and field in found["message"]


def test_a_coefficient_the_runs_cannot_identify_is_an_error_when_required(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = summary(tmp_path / "s.json", aggregator=role(1024, 16))
    code, found = calibrate(capsys, run, "--workload", "cnn-digits", "--platform",
                            "aws-lambda-x86_64-s3", "--refit", "a", "m")
    assert code == 2 and found["argument"] == "--refit"
    assert "cannot refit m" in found["message"]
    assert "a run at another memory size identifies it" in found["message"]
    code, found = calibrate(capsys, run, "--workload", "cnn-digits", "--platform",
                            "aws-lambda-x86_64-s3", "--refit", "torch_load_cpu_s")
    assert code == 2 and "no first-segment invocation" in found["message"]


def test_unknown_platform_names_the_flag(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    run = summary(tmp_path / "s.json", aggregator=role(1024, 16))
    code, found = calibrate(capsys, run, "--workload", "cnn-digits", "--platform", "nowhere")
    assert code == 2 and found["argument"] == "--platform"
    assert np.isfinite(TRUE.a)
