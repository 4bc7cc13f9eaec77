"""Shipped profiles load, validate, round-trip, and reproduce the paper's arithmetic."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasdl.contract.plan import Workload
from planner.model.inputs.profiles import (
    LAMBDA_MAX_VCPUS,
    LAMBDA_MB_PER_VCPU,
    PlatformProfile,
    Prices,
    ProfileError,
    WorkloadProfile,
    known_platforms,
    known_regions,
    known_workloads,
    lambda_vcpus,
    load_platform,
    load_platform_file,
    load_prices,
    load_workload,
)

PAPER_WORKLOADS = ["bert-base-cola", "mobilenet-cifar10", "resnet50-cifar10", "squeezenet-cifar10"]
CHANNEL_ARCH = [(c, a) for c in ("s3", "valkey") for a in ("x86_64", "arm64")]


# ---- shipped files ---------------------------------------------------------------------------

def test_known_names() -> None:
    assert known_workloads() == sorted([*PAPER_WORKLOADS, "bert-mini-textset", "cnn-digits",
                                        "mlp-digits"])
    assert known_platforms() == ["aws-lambda-x86_64-s3", "aws-lambda-x86_64-valkey"]
    assert known_regions() == ["eu-west-1", "us-east-1", "us-west-2"]


@pytest.mark.parametrize("name", known_workloads())
def test_every_shipped_workload_loads_and_round_trips(name: str) -> None:
    profile = load_workload(name)
    assert profile.name == name
    assert profile.notes  # every shipped coefficient is explained
    assert WorkloadProfile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile
    workload = profile.workload
    assert isinstance(workload, Workload)
    assert (workload.samples, workload.model_mb) == (profile.samples, profile.model_mb)


@pytest.mark.parametrize(("name", "label"), [
    ("cnn-digits", "Not measured on AWS Lambda"), ("mlp-digits", "PROVISIONAL")])
def test_local_workloads_say_where_their_numbers_come_from(name: str, label: str,
                                                           tmp_path: Path) -> None:
    from fasdl.datasets import build_digits

    profile = load_workload(name)
    assert label in profile.notes  # local emulation or guesses, never passed off as AWS
    # The train split the runtime actually trains on.
    assert profile.samples == build_digits(tmp_path)["train"]


@pytest.mark.parametrize(("channel", "arch"), CHANNEL_ARCH)
def test_every_platform_loads_and_round_trips(channel: str, arch: str) -> None:
    profile = load_platform(channel, arch)
    assert (profile.channel, profile.arch) == (channel, arch)
    assert profile.name == f"aws-lambda-{arch}-{channel}"
    assert PlatformProfile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile
    if arch == "arm64":
        x86 = load_platform(channel, "x86_64")
        assert profile.up_peak == x86.up_peak and profile.down_rate == x86.down_rate
        assert "reuses the x86_64" in profile.source
    if channel == "valkey":
        assert "ASSUMPTION" in profile.source


def test_prices_load_and_round_trip() -> None:
    prices = load_prices()
    assert prices.lambda_mb_s("x86_64") == pytest.approx(1.66667e-5 / 1024)
    assert prices.lambda_mb_s("arm64") == pytest.approx(1.33334e-5 / 1024)
    assert (prices.s3_put, prices.s3_get) == pytest.approx((5e-6, 4e-7))
    assert prices.sfn_transition == pytest.approx(2.5e-5)
    assert prices.valkey_ecpu == pytest.approx(2.3e-9)
    assert "lambda/pricing" in prices.source
    assert Prices.from_dict(json.loads(json.dumps(prices.to_dict()))) == prices
    with pytest.raises(ProfileError, match="x86_64"):
        prices.lambda_mb_s("sparc")


def test_load_from_paths(tmp_path: Path) -> None:
    workload = load_workload("resnet50-cifar10").to_dict() | {"name": "mine"}
    (tmp_path / "mine.json").write_text(json.dumps(workload))
    assert load_workload(str(tmp_path / "mine.json")).name == "mine"
    platform = load_platform("s3").to_dict() | {"name": "my-account"}
    (tmp_path / "p.json").write_text(json.dumps(platform))
    assert load_platform_file(tmp_path / "p.json").name == "my-account"
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ProfileError, match=r"broken\.json is not valid JSON"):
        load_workload(str(tmp_path / "broken.json"))


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ProfileError, match="resnet50-cifar10") as error:
        load_workload("alexnet")
    assert error.value.field == "workload"
    with pytest.raises(ProfileError, match="s3, valkey"):
        load_platform("ftp")
    with pytest.raises(ProfileError, match="x86_64, arm64"):
        load_platform("s3", "riscv")
    with pytest.raises(ProfileError, match="us-east-1"):
        load_prices("mars-north-1")


# ---- validation names the bad field ----------------------------------------------------------

def _expect_field(kind: Any, data: dict[str, Any], field: str) -> None:
    with pytest.raises(ProfileError) as error:
        kind.from_dict(data)
    assert error.value.field == field
    assert f"'{field}'" in str(error.value)


@pytest.mark.parametrize(("field", "value"), [
    ("name", "has space"), ("model", ""), ("dataset", "/abs"), ("samples", 0), ("samples", 1.5),
    ("samples", True), ("dataset_mb", 0), ("model_mb", -1.0), ("a", 0.0), ("a", "fast"),
    ("b", -2.0), ("m", math.nan), ("m", math.inf), ("k", 0.0), ("c", -1.0), ("notes", 3),
])
def test_bad_workload_fields_are_named(field: str, value: object) -> None:
    _expect_field(WorkloadProfile, load_workload("resnet50-cifar10").to_dict() | {field: value},
                  field)


@pytest.mark.parametrize(("field", "value"), [
    ("name", ""), ("channel", "ftp"), ("arch", "ppc"), ("source", None),
    ("memory_mb", [256.0, 128.0]), ("memory_mb", []), ("memory_mb", "128"),
    ("up_peak", [1.0]), ("invocation_overhead_s", -1.0), ("torch_load_cpu_s", -0.5),
    ("torch_load_cpu_s", "slow"), ("torch_load_cpu_s", math.inf), ("torch_load_cpu_s", None),
    ("segment_overhead_s", -1.0), ("segment_overhead_s", 901.0),
])
def test_bad_platform_fields_are_named(field: str, value: object) -> None:
    _expect_field(PlatformProfile, load_platform("s3").to_dict() | {field: value}, field)


def test_a_measured_segment_overhead_round_trips_and_zero_stays_out_of_files() -> None:
    shipped = load_platform("s3")
    assert "segment_overhead_s" not in shipped.to_dict()
    measured = PlatformProfile.from_dict(shipped.to_dict() | {"segment_overhead_s": 4.5})
    assert measured.segment_overhead_s == 4.5
    assert PlatformProfile.from_dict(measured.to_dict()) == measured


def test_a_platform_without_the_torch_load_names_it_with_its_range() -> None:
    data = load_platform("s3").to_dict()
    del data["torch_load_cpu_s"]
    _expect_field(PlatformProfile, data, "torch_load_cpu_s")
    with pytest.raises(ProfileError, match=r"'torch_load_cpu_s': must be >= 0\.0, got -1"):
        PlatformProfile.from_dict(load_platform("s3").to_dict() | {"torch_load_cpu_s": -1})


def test_shipped_platforms_charge_the_torch_load() -> None:
    for channel in ("s3", "valkey"):
        for arch in ("x86_64", "arm64"):
            platform = load_platform(channel, arch)
            assert platform.torch_load_cpu_s > 0.0 and platform.invocation_overhead_s > 0.0


def test_lambda_vcpus_are_memory_over_1769_up_to_6() -> None:
    from local.lambda_.lambda_speed import LAMBDA_MAX_VCPUS as EMULATED_MAX
    from local.lambda_.lambda_speed import LAMBDA_MB_PER_VCPU as EMULATED_MB

    # the planner charges what the local emulation enforces
    assert (LAMBDA_MB_PER_VCPU, LAMBDA_MAX_VCPUS) == (EMULATED_MB, EMULATED_MAX)
    np.testing.assert_allclose(lambda_vcpus([128, 884.5, 1769, 3538, 10240, 20000]),
                               [128 / 1769, 0.5, 1.0, 2.0, 10240 / 1769, 6.0])


def test_torch_load_slows_below_one_vcpu_and_not_above() -> None:
    platform = PlatformProfile.from_dict(load_platform("s3").to_dict()
                                         | {"torch_load_cpu_s": 3.0})
    loads = platform.torch_load_s([442.25, 884.5, 1769, 3538, 10240])
    # one thread: a quarter vCPU takes 4x, one vCPU exactly the CPU-seconds, more helps nothing
    np.testing.assert_allclose(loads, [12.0, 6.0, 3.0, 3.0, 3.0])


def test_bad_platform_element_is_named_with_its_index() -> None:
    data = load_platform("s3").to_dict()
    data["down_rate"] = [-1.0, *data["down_rate"][1:]]
    _expect_field(PlatformProfile, data, "down_rate[0]")


@pytest.mark.parametrize(("field", "value"), [
    ("region", "mars"), ("lambda_gb_s", {}), ("lambda_gb_s", 1.0), ("s3_put", -1.0),
    ("valkey_kb_per_ecpu", 0.0), ("sfn_transition", "cheap"),
])
def test_bad_price_fields_are_named(field: str, value: object) -> None:
    _expect_field(Prices, load_prices().to_dict() | {field: value}, field)


def test_unknown_price_architecture_is_named() -> None:
    _expect_field(Prices, load_prices().to_dict() | {"lambda_gb_s": {"sparc": 1e-5}},
                  "lambda_gb_s.sparc")


def _shipped_dicts() -> list[tuple[Any, dict[str, Any], str]]:
    return [(WorkloadProfile, load_workload("mlp-digits").to_dict(), "samples"),
            (PlatformProfile, load_platform("s3").to_dict(), "memory_mb"),
            (Prices, load_prices().to_dict(), "region")]


@pytest.mark.parametrize(("kind", "data", "required"), _shipped_dicts())
def test_unknown_and_missing_fields_are_named(kind: Any, data: dict[str, Any],
                                              required: str) -> None:
    _expect_field(kind, data | {"colour": "red"}, "colour")
    _expect_field(kind, {key: value for key, value in data.items() if key != required},
                  required)
    with pytest.raises(ProfileError, match="JSON object"):
        kind.from_dict([])


# ---- workload arithmetic ---------------------------------------------------------------------

def test_train_time_matches_table_ii_arithmetic() -> None:
    resnet = load_workload("resnet50-cifar10")
    # 37.19 · (128 + 12.48) / (1536 − 111.46)
    assert float(resnet.train_time(128, 1536)) == pytest.approx(3.6675, abs=1e-3)
    squeeze = load_workload("squeezenet-cifar10")
    assert float(squeeze.train_time(201, 768)) == pytest.approx(2.16 * 223.6 / 674.78)


def test_train_time_broadcasts_and_is_infinite_without_compute() -> None:
    resnet = load_workload("resnet50-cifar10")
    times = resnet.train_time(np.array([[32], [64], [128]]), np.array([100.0, 111.46, 1024]))
    assert times.shape == (3, 3)
    assert np.all(np.isinf(times[:, :2])) and np.all(np.isfinite(times[:, 2]))
    assert np.all(np.diff(times[:, 2]) > 0)


# The configurations FasDL Table IV reports as run (K-REDUCE B^a and B^n, ScatterReduce,
# AllReduce and lambdaDNN) must fit the memory model.
PAPER_CONFIGURATIONS = [
    ("resnet50-cifar10", 128, 1536), ("resnet50-cifar10", 170, 1536),
    ("resnet50-cifar10", 128, 1664), ("resnet50-cifar10", 512, 3328),
    ("squeezenet-cifar10", 201, 768), ("squeezenet-cifar10", 128, 640),
    ("squeezenet-cifar10", 128, 1792), ("squeezenet-cifar10", 192, 768),
    ("mobilenet-cifar10", 192, 1920), ("mobilenet-cifar10", 256, 2304),
    ("mobilenet-cifar10", 128, 2048), ("bert-base-cola", 84, 10240),
    ("bert-base-cola", 32, 10240),
]


@pytest.mark.parametrize(("name", "batch", "memory"), PAPER_CONFIGURATIONS)
def test_paper_configurations_are_executable(name: str, batch: int, memory: int) -> None:
    profile = load_workload(name)
    assert int(profile.max_batch(memory)) >= batch
    assert float(profile.min_memory(batch)) <= memory


def test_max_batch_is_int64_and_may_be_non_positive() -> None:
    resnet = load_workload("resnet50-cifar10")
    batches = resnet.max_batch([128, 592, 1536])
    assert batches.dtype == np.int64
    assert batches.tolist() == [-93, 0, 188]


# ---- platform interpolation ------------------------------------------------------------------

def test_coefficients_interpolate_linearly_between_neighbours() -> None:
    s3 = load_platform("s3")
    low, high = s3.memory_mb.index(1536.0), s3.memory_mb.index(1792.0)
    peak, rate = s3.coefficients("up", 1664)
    assert float(peak) == pytest.approx((s3.up_peak[low] + s3.up_peak[high]) / 2)
    assert float(rate) == pytest.approx((s3.up_rate[low] + s3.up_rate[high]) / 2)
    neighbours = s3.throughput("down", [1536, 1792], 10.0)
    between = float(s3.throughput("down", 1600, 10.0))
    assert min(neighbours) <= between <= max(neighbours)


@pytest.mark.parametrize("direction", ["up", "down"])
def test_coefficients_are_clamped_outside_the_profiled_memories(direction: str) -> None:
    s3 = load_platform("s3")
    sizes = np.array([0.5, 5.0, 50.0])
    at_top = s3.throughput(direction, 3008, sizes)  # type: ignore[arg-type]
    for memory in (3009, 5000, 10240):
        np.testing.assert_array_equal(s3.throughput(direction, memory, sizes), at_top)  # type: ignore[arg-type]
    np.testing.assert_array_equal(s3.throughput(direction, 64, sizes),  # type: ignore[arg-type]
                                  s3.throughput(direction, 128, sizes))  # type: ignore[arg-type]


def test_transfer_time_is_size_over_throughput_with_a_finite_empty_object() -> None:
    s3 = load_platform("s3")
    sizes = np.array([0.1, 1.0, 24.4])
    np.testing.assert_allclose(s3.transfer_time("up", 1536, sizes),
                               sizes / s3.throughput("up", 1536, sizes))
    peak, rate = s3.coefficients("down", 1536)
    assert float(s3.transfer_time("down", 1536, 0.0)) == pytest.approx(1 / (peak * rate))
    assert float(s3.transfer_time("down", 1536, 1e-9)) == pytest.approx(1 / (peak * rate))
    with pytest.raises(ProfileError, match="size"):
        s3.transfer_time("up", 1536, -1.0)
    with pytest.raises(ProfileError, match="direction"):
        s3.throughput("sideways", 1536, 1.0)  # type: ignore[arg-type]


def test_valkey_is_faster_than_s3_for_small_shards_only() -> None:
    s3, valkey = load_platform("s3"), load_platform("valkey")
    assert float(valkey.transfer_time("up", 1024, 0.25)) < 0.2 * float(
        s3.transfer_time("up", 1024, 0.25))
    assert float(valkey.throughput("down", 1024, 500)) == pytest.approx(
        float(s3.throughput("down", 1024, 500)), rel=1e-6)


@settings(max_examples=200, deadline=None)
@given(channel=st.sampled_from(["s3", "valkey"]), direction=st.sampled_from(["up", "down"]),
       memory=st.floats(min_value=1, max_value=20_000),
       sizes=st.tuples(st.floats(min_value=0, max_value=2000),
                       st.floats(min_value=0, max_value=2000)))
def test_throughput_is_monotone_in_size(channel: str, direction: str, memory: float,
                                        sizes: tuple[float, float]) -> None:
    profile = load_platform(channel)
    small, large = sorted(sizes)
    tp_small, tp_large = profile.throughput(direction, memory, [small, large])  # type: ignore[arg-type]
    assert 0 <= tp_small <= tp_large
    times = profile.transfer_time(direction, memory, [small, large])  # type: ignore[arg-type]
    assert np.all(np.isfinite(times)) and np.all(times > 0)


@pytest.mark.parametrize(("changes", "message"), [
    ({"samples": 0}, r"^profile field 'samples': must be in \[1, 10000000000\], got 0$"),
    ({"model": "../net.py:build"}, r"^profile field 'model': the file's path must not "),
    ({"loss": "hinge"}, r"^profile field 'loss': must be one of cross_entropy, mse, bce"),
    ({"input_shape": [3, 0]}, r"^profile field 'input_shape\[1\]': must be in \[1, 100000\]"),
    ({"dataset": "a//b"}, r"^profile field 'dataset': must be '/'-separated names"),
])
def test_a_profiles_workload_fields_are_checked_by_the_plans_rules(
        changes: dict[str, object], message: str) -> None:
    """WorkloadProfile holds the plan's Workload (issue 40): its fields are checked once, by
    Workload.validate, and the error is a ProfileError naming the file's own field."""
    data = {**load_workload("cnn-digits").to_dict(), **changes}
    with pytest.raises(ProfileError, match=message) as raised:
        WorkloadProfile.from_dict(data)
    assert raised.value.field == message.split("'")[1].replace("\\", "")


def test_a_profile_holds_its_workload_once() -> None:
    profile = load_workload("cnn-digits")
    assert isinstance(profile.workload, Workload)
    assert (profile.name, profile.samples) == (profile.workload.name, profile.workload.samples)
    fewer = profile.with_workload(samples=100)
    assert fewer.samples == fewer.workload.samples == 100 and fewer.a == profile.a
    assert list(fewer.to_dict())[:7] == ["name", "model", "dataset", "samples", "dataset_mb",
                                         "model_mb", "a"]
