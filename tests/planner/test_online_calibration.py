"""planner/adapt/online_calibration.py: what a run's finished segments identify, refitted and
weighted toward the newest; what they cannot identify kept, and said (issue 42, step 1)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.adapt.online_calibration import (
    CalibrationError,
    ClockWindow,
    OnlineFit,
    SegmentRoles,
    online_fit,
    recency_weights,
    scaled_transfers,
    segment_overhead_s,
    weighted_per_iteration,
)
from planner.model.inputs.profiles import load_platform, load_workload

M, BA, BN = 1024, 16, 48
WORKLOAD, PLATFORM = load_workload("cnn-digits"), load_platform("valkey")
PREDICTED_EXCHANGE_S = 0.2


def segment(index: int, *, slower: float = 1.0, exchange: float = 1.0,
            batches: tuple[int, int] = (BA, BN), iterations: int = 20) -> SegmentRoles:
    """What a segment measures on a platform whose compute is ``slower`` times the profile's
    and whose aggregators' exchange is ``exchange`` times the predicted one."""
    roles = {}
    for role, batch in zip(("aggregator", "non_aggregator"), batches, strict=True):
        roles[role] = {"iterations": iterations, "compute_s_per_iteration":
                       slower * float(WORKLOAD.train_time(batch, M)),
                       "exchange_s_per_iteration": exchange * PREDICTED_EXCHANGE_S,
                       "cold_start_s": slower * float(PLATFORM.cold_start_s(M))}
    return SegmentRoles(index, roles)


def fit(segments: list[SegmentRoles], batches: tuple[int, int] = (BA, BN)) -> OnlineFit:
    return online_fit(WORKLOAD, PLATFORM, segments, memory_mb=M,
                      batches={"aggregator": batches[0], "non_aggregator": batches[1]},
                      predicted_exchange_s=PREDICTED_EXCHANGE_S, measured_on="test")


def test_a_platform_twice_as_slow_is_found_in_compute_and_exchange() -> None:
    """Two batches at one memory size: a and b refitted at the profile's m (kept, and said);
    the exchange factor 2 divides the transfer peaks; the refitted profiles predict what the
    segments measured."""
    result = fit([segment(i, slower=2.0, exchange=2.0) for i in range(3)])
    for batch in (BA, BN):
        assert float(result.workload.train_time(batch, M)) == pytest.approx(
            2.0 * float(WORKLOAD.train_time(batch, M)), rel=1e-4)
    assert result.workload.m == WORKLOAD.m
    assert any(item.startswith("m kept") for item in result.kept)
    assert result.exchange_factor == pytest.approx(2.0)
    assert result.platform.up_peak[0] == pytest.approx(PLATFORM.up_peak[0] / 2.0)
    assert result.platform.up_rate == PLATFORM.up_rate  # t(M): not identified
    assert float(result.platform.cold_start_s(M)) == pytest.approx(
        2.0 * float(PLATFORM.cold_start_s(M)), rel=1e-3)


def test_the_cpu_a_step_and_the_exchange_use_moves_with_the_compute() -> None:
    """A platform twice as slow in compute is twice as slow in all its CPU: the step's profiled
    CPU and the exchange client's, the model's CPU bound; without this a plan made on a slower
    profile predicted CPU-bound iterations as slow as planned after the refit."""
    workload = replace(WORKLOAD, cpu_step_s=0.01, cpu_sample_s=0.002)
    platform = replace(PLATFORM, cpu_up_mb_s=0.004, cpu_fold_mb_s=0.003)
    result = online_fit(workload, platform, [segment(i, slower=0.5) for i in range(3)],
                        memory_mb=M, batches={"aggregator": BA, "non_aggregator": BN},
                        predicted_exchange_s=PREDICTED_EXCHANGE_S, measured_on="test")
    assert result.workload.cpu_step_s == pytest.approx(0.005, rel=1e-3)
    assert result.workload.cpu_sample_s == pytest.approx(0.001, rel=1e-3)
    assert result.platform.cpu_up_mb_s == pytest.approx(0.002, rel=1e-3)
    assert result.platform.cpu_fold_mb_s == pytest.approx(0.0015, rel=1e-3)
    assert result.platform.cpu_down_mb_s == 0.0  # unprofiled stays unprofiled
    for batch in (BA, BN):  # the bound at the refitted share predicts half the CPU time
        assert float(result.workload.train_cpu_time(batch, M)) == pytest.approx(
            0.5 * float(workload.train_cpu_time(batch, M)), rel=1e-3)


def test_one_batch_scales_a_alone_and_says_b_is_kept() -> None:
    result = fit([segment(i, slower=1.5, batches=(32, 32)) for i in range(2)], (32, 32))
    assert result.workload.b == WORKLOAD.b
    assert float(result.workload.train_time(32, M)) == pytest.approx(
        1.5 * float(WORKLOAD.train_time(32, M)), rel=1e-4)
    assert any(item.startswith("b kept") for item in result.kept)


def test_the_newest_segments_weigh_most() -> None:
    """Segments 0-1 on the planned platform, 2-5 at twice the compute: the refit is
    nearer 2x (1.86x) than the plain mean (1.67x) would put it."""
    segments = [segment(i, slower=1.0 if i < 2 else 2.0) for i in range(6)]
    mean, iterations = weighted_per_iteration(segments, "aggregator",
                                              "compute_s_per_iteration") or (0.0, 0)
    planned = float(WORKLOAD.train_time(BA, M))
    assert iterations == 120
    assert mean == pytest.approx(1.857 * planned, rel=1e-3)
    assert recency_weights([0, 2, 4]) == [0.25, 0.5, 1.0]


def test_without_a_first_segment_the_cold_start_is_kept() -> None:
    result = fit([segment(3, slower=2.0), segment(4, slower=2.0)])
    assert result.platform.invocation_overhead_s == PLATFORM.invocation_overhead_s
    assert result.platform.torch_load_cpu_s == PLATFORM.torch_load_cpu_s
    assert any(item.startswith("cold start kept") for item in result.kept)


def test_bad_figures_name_the_field_and_nothing_is_refitted_from_nothing() -> None:
    bad = segment(0)
    broken = replace(bad, roles={**bad.roles, "aggregator": {
        **bad.roles["aggregator"], "compute_s_per_iteration": -1.0}})
    with pytest.raises(CalibrationError, match=r"segment 0: roles.aggregator."
                                               r"compute_s_per_iteration must be a number"):
        fit([broken])
    with pytest.raises(CalibrationError, match="no finished segment"):
        fit([])
    with pytest.raises(CalibrationError, match="exchange factor must be > 0"):
        scaled_transfers(PLATFORM, 0.0)
    empty = fit([SegmentRoles(0, {})])
    assert empty.workload == WORKLOAD and empty.exchange_factor == 1.0
    assert len(empty.kept) == 2


def test_the_clock_beyond_the_model_is_the_segment_overhead() -> None:
    """A cold window pays the configuration's cold start once; a warm one does not; a clock
    faster than the model gives 0, never a negative overhead; no segments is refused."""
    iteration, cold, load = 0.5, 12.0, 0.25
    warm = ClockWindow(segments=4, iterations=40, elapsed_s=4 * (10 * iteration + load + 3.0),
                       cold=False)
    assert segment_overhead_s(warm, iteration_s=iteration, cold_start_s=cold,
                              load_and_checkpoint_s=load) == pytest.approx(3.0)
    started = replace(warm, elapsed_s=warm.elapsed_s + cold, cold=True)
    assert segment_overhead_s(started, iteration_s=iteration, cold_start_s=cold,
                              load_and_checkpoint_s=load) == pytest.approx(3.0)
    assert segment_overhead_s(replace(warm, elapsed_s=1.0), iteration_s=iteration,
                              cold_start_s=cold, load_and_checkpoint_s=load) == 0.0
    with pytest.raises(CalibrationError, match="segments must be >= 1"):
        segment_overhead_s(replace(warm, segments=0), iteration_s=iteration,
                           cold_start_s=cold, load_and_checkpoint_s=load)
