"""`planner fit`: recovers known coefficients from synthetic samples, refuses samples that
cannot identify a parameter, and its output plans with `planner plan`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.commands.cli import main
from planner.commands.cli_inputs import EXIT_BAD_INPUT, EXIT_OK
from planner.fit.fit_files import FitRequest, run_fit
from planner.fit.profiler import fit_transfers, fit_workload
from planner.fit.samples import SampleError, read_samples
from planner.fit.throughput import DEFAULT_TORCH_LOAD_CPU_S
from planner.model.inputs.profiles import load_platform, load_platform_file, load_workload
from tests.planner.fit_samples import (
    BATCHES,
    MEMORIES,
    SIZES_MB,
    TRUE,
    fit_args,
    train_records,
    transfer_records,
    write,
)


def test_exact_samples_recover_the_coefficients(tmp_path: Path) -> None:
    samples = read_samples([write(tmp_path / "s.jsonl", train_records(0.0))])
    fit = fit_workload(samples.train)
    assert fit.a == pytest.approx(TRUE["a"], rel=1e-3)
    assert fit.b == pytest.approx(TRUE["b"], rel=1e-3)
    assert fit.m == pytest.approx(TRUE["m"], abs=0.5)
    assert fit.k == pytest.approx(TRUE["k"], rel=1e-6)
    assert fit.c == pytest.approx(TRUE["c"], rel=1e-6)
    assert fit.time_quality.r_squared > 0.999999


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noisy_samples_predict_within_the_noise(tmp_path: Path, seed: int) -> None:
    samples = read_samples([write(tmp_path / "s.jsonl", train_records(0.02, seed))])
    fit = fit_workload(samples.train)
    grid_b, grid_m = np.meshgrid(BATCHES, MEMORIES)
    truth = TRUE["a"] * (grid_b + TRUE["b"]) / (grid_m + TRUE["m"])
    fitted = fit.a * (grid_b + fit.b) / (grid_m + fit.m)
    assert np.max(np.abs(fitted / truth - 1)) < 0.03
    assert fit.k == pytest.approx(TRUE["k"], rel=0.1)
    assert fit.c == pytest.approx(TRUE["c"], rel=0.05)
    assert fit.time_quality.max_relative_error < 0.1


def test_transfer_fit_recovers_the_shipped_s3_profile(tmp_path: Path) -> None:
    truth = load_platform("s3")
    samples = read_samples([write(tmp_path / "t.jsonl", transfer_records(0.01))])
    for fit in fit_transfers(samples.transfer, "s3"):
        peak, rate = truth.coefficients(fit.direction, fit.memory_mb)
        predicted = fit.peak * -np.expm1(-fit.rate * np.array(SIZES_MB))
        expected = peak * -np.expm1(-rate * np.array(SIZES_MB))
        assert np.max(np.abs(predicted / expected - 1)) < 0.03, fit


@pytest.mark.parametrize("records,message", [
    (train_records(0.0, batches=(32,)), "single batch size"),
    (train_records(0.0, memories=(2048,)), "single memory size"),
])
def test_unidentifiable_training_samples_are_refused(tmp_path: Path,
                                                     records: list[dict[str, Any]],
                                                     message: str) -> None:
    samples = read_samples([write(tmp_path / "s.jsonl", records)])
    with pytest.raises(SampleError, match=message):
        fit_workload(samples.train)


def test_one_object_size_per_memory_is_refused(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    samples = write(tmp_path / "t.jsonl", transfer_records(0.0, sizes=(8.0,)))
    code = main(["fit", "--samples", samples, "--out", str(tmp_path / "p.json"),
                 "--kind", "platform"])
    error = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT
    assert "argument --samples" in error and "1 object size(s)" in error
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("line,field", [
    ('{"kind": "train", "memory_mb": 1024, "batch": 8.5, "seconds": 1, "model": "cnn"}',
     "batch"),
    ('{"kind": "transfer", "memory_mb": 1024, "channel": "s3", "direction": "sideways", '
     '"size_mb": 1, "seconds": 1}', "direction"),
    ('{"kind": "train", "memory_mb": -1}', "memory_mb"),
    ('{"kind": "duplex", "memory_mb": 1024, "channel": "s3", "size_mb": 4, "seconds": 1, '
     '"up_s": 1}', "down_s"),
    ("not json", "not valid JSON"),
])
def test_malformed_lines_name_file_line_and_field(tmp_path: Path, line: str,
                                                  field: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n" + line + "\n")
    with pytest.raises(SampleError, match=rf"bad\.jsonl:2: .*{field}"):
        read_samples([path])


def test_workload_needs_its_name_and_dataset(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    samples = write(tmp_path / "s.jsonl", train_records(0.0))
    code = main(["fit", "--samples", samples, "--out", str(tmp_path / "w.json"),
                 "--kind", "workload", "--json"])
    document = json.loads(capsys.readouterr().out.splitlines()[0])
    assert code == EXIT_BAD_INPUT and document["argument"] == "--name"


def test_fitted_profiles_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = write(tmp_path / "all.jsonl", train_records(0.01) + transfer_records(0.01))
    code = main(fit_args(samples, tmp_path / "profile.json", "--png",
                         str(tmp_path / "fit.png")))
    report = capsys.readouterr().out
    assert code == EXIT_OK, report
    assert "R²" in report and "max relative error" in report
    workload_path = tmp_path / "profile-workload.json"
    platform_path = tmp_path / "profile-platform.json"
    workload = load_workload(str(workload_path))
    platform = load_platform_file(platform_path)
    assert workload.model == "resnet50" and workload.model_mb == 97.49
    assert platform.channel == "s3" and platform.memory_mb == (1024.0, 2048.0, 4096.0)
    # transfer samples do not measure a cold start: the local measurement is written
    assert platform.torch_load_cpu_s == DEFAULT_TORCH_LOAD_CPU_S
    assert (tmp_path / "fit.png").stat().st_size > 10_000
    code = main(["plan", "--workload", str(workload_path), "--platform", str(platform_path),
                 "--deadline", "8000", "--max-global-batch", "1024", "--epochs", "2",
                 "--out", str(tmp_path / "plan.json"), "--json"])
    document = json.loads(capsys.readouterr().out.splitlines()[0])
    assert code == EXIT_OK, document
    assert document["plan"]["workload"]["model"] == "resnet50"


def test_fit_writes_the_torch_load_it_is_given(tmp_path: Path) -> None:
    samples = write(tmp_path / "t.jsonl", transfer_records(0.0))
    out = tmp_path / "p.json"
    _, summary = run_fit(FitRequest(samples=[samples], out=str(out), kind="platform",
                                    torch_load_cpu_s=7.5, invocation_overhead_s=0.25))
    platform = load_platform_file(out)
    assert (platform.torch_load_cpu_s, platform.invocation_overhead_s) == (7.5, 0.25)
    assert summary["platform"]["torch_load_cpu_s"] == 7.5


def duplex_records(hidden: float, memories: tuple[float, ...] = (1024.0, 2048.0, 4096.0)
                   ) -> list[dict[str, Any]]:
    """Up 0.3 s and downloads 0.3 s alone; at once (2 − d)·0.3."""
    return [{"kind": "duplex", "memory_mb": memory, "channel": "s3", "size_mb": 16.0,
             "seconds": (2 - hidden) * 0.3, "up_s": 0.3, "down_s": 0.3}
            for memory in memories for _ in range(3)]


@pytest.mark.parametrize("hidden", [1.0, 0.5, 0.0])
def test_the_fit_measures_how_far_upload_and_download_overlap(tmp_path: Path,
                                                              hidden: float) -> None:
    samples = write(tmp_path / "s.jsonl", transfer_records(0.0) + duplex_records(hidden))
    out = tmp_path / "p.json"
    assert main(fit_args(samples, out, "--kind", "platform")) == EXIT_OK
    assert load_platform_file(out).duplex == pytest.approx((hidden,) * 3, abs=1e-9)


def test_without_duplex_samples_full_duplex_is_assumed(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    samples = write(tmp_path / "s.jsonl", transfer_records(0.0))
    out = tmp_path / "p.json"
    assert main(fit_args(samples, out, "--kind", "platform")) == EXIT_OK
    assert load_platform_file(out).duplex == ()
    assert load_platform_file(out).duplex_at(2048) == 1.0
    assert "duplex 1 (assumed: no duplex samples)" in capsys.readouterr().out
