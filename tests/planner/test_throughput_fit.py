"""The shipped S3 profile is reproducible from the measurements and fits them well."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.commands.cli import main
from planner.fit.throughput import (
    DEFAULT_INVOCATION_OVERHEAD_S,
    DEFAULT_TORCH_LOAD_CPU_S,
    SaturationFit,
    TransferSample,
    derive_valkey_profile,
    fit_all,
    fit_saturation,
    platform_from_fits,
    read_transfer_csv,
    relative_time_errors,
    rounded,
)
from planner.model.inputs.profiles import PlatformProfile, load_platform

REPO = Path(__file__).resolve().parents[2]
# shared/ sits beside the repository, in development and in CI alike.
CSV = REPO / "planner/data/measurements/lambda_s3_transfer_times.csv"


@pytest.fixture(scope="module")
def samples() -> list[TransferSample]:
    return read_transfer_csv(CSV)


@pytest.fixture(scope="module")
def fits(samples: list[TransferSample]) -> list[SaturationFit]:
    return fit_all(samples)


@pytest.fixture(scope="module")
def shipped() -> PlatformProfile:
    return load_platform("s3", "x86_64")


def test_csv_has_the_documented_shape(samples: list[TransferSample]) -> None:
    assert len(samples) == 456
    assert sorted({s.memory_mb for s in samples})[::13] == [128.0, 3008.0]


def test_refit_matches_the_shipped_profile(fits: list[SaturationFit],
                                           shipped: PlatformProfile) -> None:
    refit = rounded(platform_from_fits(fits, name=shipped.name, channel="s3", arch="x86_64",
                                       source=shipped.source,
                                       invocation_overhead_s=DEFAULT_INVOCATION_OVERHEAD_S,
                                       torch_load_cpu_s=DEFAULT_TORCH_LOAD_CPU_S))
    assert refit.memory_mb == shipped.memory_mb
    for name in ("up_peak", "up_rate", "down_peak", "down_rate"):
        np.testing.assert_allclose(getattr(refit, name), getattr(shipped, name), rtol=1e-3,
                                   err_msg=name)
    assert shipped.invocation_overhead_s == DEFAULT_INVOCATION_OVERHEAD_S
    assert shipped.torch_load_cpu_s == DEFAULT_TORCH_LOAD_CPU_S


def test_shipped_valkey_profile_is_derived_from_the_shipped_s3_profile(
        shipped: PlatformProfile) -> None:
    assert derive_valkey_profile(shipped).to_dict() == load_platform("valkey").to_dict()


def test_per_memory_fit_quality(fits: list[SaturationFit]) -> None:
    # Measured on the shipped data: worst per-memory median 0.084, worst R² 0.788.
    assert len(fits) == 28
    for fit in fits:
        label = f"{fit.memory_mb:g} MB {fit.direction}"
        assert fit.median_relative_error < 0.10, label
        assert fit.r_squared > 0.75, label
        assert fit.max_relative_error < 0.55, label  # the odd 100 MB points, see source


def test_shipped_profile_predicts_every_measured_time(samples: list[TransferSample],
                                                      shipped: PlatformProfile) -> None:
    # Measured: up median 0.059 / p90 0.143; down median 0.042 / p90 0.098.
    for direction, median_bound, p90_bound in (("up", 0.065, 0.16), ("down", 0.05, 0.11)):
        errors = relative_time_errors(shipped, samples, direction)  # type: ignore[arg-type]
        assert np.median(errors) < median_bound, direction
        assert np.quantile(errors, 0.9) < p90_bound, direction


def test_fit_recovers_known_coefficients_from_noiseless_times() -> None:
    sizes = np.array([0.5, 1, 2, 4, 8, 16, 32, 64.0])
    peak, rate = 70.0, 0.15
    times = sizes / (peak * (1 - np.exp(-rate * sizes)))
    fitted_peak, fitted_rate = fit_saturation(sizes.tolist(), times.tolist())
    assert fitted_peak == pytest.approx(peak, rel=1e-6)
    assert fitted_rate == pytest.approx(rate, rel=1e-6)


def test_throughput_rises_with_size_and_saturates_at_the_peak(
        shipped: PlatformProfile) -> None:
    sizes = np.geomspace(0.01, 1000, 200)
    for direction in ("up", "down"):
        peaks = np.array(shipped.up_peak if direction == "up" else shipped.down_peak)
        for memory, peak in zip(shipped.memory_mb, peaks, strict=True):
            throughput = shipped.throughput(direction, memory, sizes)
            assert np.all(np.diff(throughput) >= 0)
            assert np.all(np.diff(throughput[sizes <= 5]) > 0)  # not yet at float saturation
            assert np.all(throughput < peak * (1 + 1e-12))
            assert throughput[-1] == pytest.approx(peak, rel=1e-9)


def test_peaks_rise_from_128_mb_to_the_plateau(shipped: PlatformProfile) -> None:
    # Not monotone everywhere (documented in source), but the low-memory climb is real.
    assert shipped.up_peak[0] < shipped.up_peak[3] < shipped.up_peak[-1]
    assert shipped.down_peak[0] < shipped.down_peak[2] <= max(shipped.down_peak)


def test_fit_csv_writes_the_shipped_files(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         shipped: PlatformProfile) -> None:
    assert main(["fit", "--csv", "--out", str(tmp_path)]) == 0  # the shipped measurements
    written = json.loads((tmp_path / "aws-lambda-x86_64-s3.json").read_text())
    assert PlatformProfile.from_dict(written).to_dict() == shipped.to_dict()
    assert (tmp_path / "aws-lambda-x86_64-valkey.json").read_text() == (
        REPO / "planner/data/platforms/aws-lambda-x86_64-valkey.json").read_text()
    output = capsys.readouterr().out
    assert "3008" in output and "median" in output
    assert main(["fit", "--csv", str(CSV), "--out", str(tmp_path / "again"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["quality"]["up"]["points"] == summary["quality"]["down"]["points"] == 456


def test_fit_csv_errors_name_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("memory_mb,object_mb\n128,1\n")
    assert main(["fit", "--csv", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "--csv" in capsys.readouterr().err
    assert main(["fit", "--csv", str(tmp_path / "none.csv"), "--out", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["fit", "--csv", "--samples", "x.jsonl", "--out", str(tmp_path)]) == 2


def test_read_transfer_csv_rejects_missing_columns(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("memory_mb,object_mb,upload_s\n128,1,0.1\n")
    with pytest.raises(ValueError, match="download_s"):
        read_transfer_csv(bad)
