"""Properties of the performance and cost model over randomized parameters."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.model.inputs.problem import FloatArray, Problem, Violation
from planner.model.inputs.profiles import lambda_vcpus, load_platform, load_prices, load_workload
from planner.model.terms.cost_model import Evaluation, aligned_non_aggregator_batch, evaluate
from planner.model.terms.exchange_time import communication_times
from tests.planner.problems import problems, without_storage_price

MEMORIES = st.integers(1, 80).map(lambda step: 128 * step)


def runnable(problem: Problem, memory: int, batch: int) -> bool:
    wl = problem.workload
    return memory + wl.m > 1.0 and batch <= int(wl.max_batch(memory))


@settings(max_examples=150, deadline=None)
@given(problem=problems(), workers=st.integers(1, 40), data=st.data())
def test_time_falls_as_memory_grows(problem: Problem, workers: int, data: st.DataObject) -> None:
    aggregators = data.draw(st.integers(1, workers))
    batch = data.draw(st.integers(1, 64)) * 16
    low, high = sorted(data.draw(st.lists(MEMORIES, min_size=2, max_size=2, unique=True)))
    assume(runnable(problem, low, batch))
    ev = evaluate(problem, workers, [low, high], aggregators, batch, batch)
    assume((ev.segment_iterations >= 1).all())
    working = working_s(ev)
    assert working[1] <= working[0] * (1 + 1e-12)
    assert ev.iteration_s[1] <= ev.iteration_s[0] * (1 + 1e-12)


def working_s(ev: Evaluation) -> FloatArray:
    """The run's time without its start on a fresh cache: ramping or waiting for the
    pre-scaled minimum is a cost choice (cache_start.py), and where an hour's wait is the
    cheaper one the time jumps by it."""
    return np.asarray(ev.time_s - np.nan_to_num(ev.cache_ramp_s)
                      - np.nan_to_num(ev.cache_wait_s))


@settings(max_examples=150, deadline=None)
@given(problem=problems(), workers=st.integers(1, 40), memory=MEMORIES, data=st.data())
def test_time_falls_as_batch_grows_at_fixed_workers(problem: Problem, workers: int, memory: int,
                                                    data: st.DataObject) -> None:
    small, large = sorted(data.draw(st.lists(st.integers(1, 64), min_size=2, max_size=2,
                                             unique=True)))
    batches = np.array([small, large]) * 16
    assume(runnable(problem, memory, int(batches[1])))
    for aggregators in (workers, 1):  # ScatterReduce and AllReduce (equal batches, BSP)
        ev = evaluate(problem, workers, memory, aggregators, batches, batches, bsp=True)
        assume((ev.segment_iterations >= 1).all())
        work = problem.epochs * ev.iterations_per_epoch * ev.iteration_s
        assert work[1] <= work[0] * (1 + 1e-12)
        if problem.workload.b > 1e-6 or workers > 1:  # else per-sample time is ~constant
            assert work[1] < work[0]
        # Whole segments are paid for: at the timeout boundary a larger batch can need more
        # segments (fewer iterations fit one); with no more segments the total falls too.
        if ev.segments[1] <= ev.segments[0]:
            assert working_s(ev)[1] <= working_s(ev)[0] * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(problem=problems(channel="s3"), workers=st.integers(2, 60), memory=MEMORIES)
def test_s3_request_cost_grows_with_aggregators(problem: Problem, workers: int,
                                                memory: int) -> None:
    ks = np.arange(1, workers + 1)
    ev = evaluate(problem, workers, memory, ks, 32, 32)
    total_iterations = problem.epochs * ev.iterations_per_epoch
    per_iteration = ev.cost_exchange_usd / total_iterations
    prices = problem.prices
    expected = prices.s3_put * ks * workers + prices.s3_get * 2 * ks * (workers - 1)
    np.testing.assert_allclose(per_iteration, expected, rtol=1e-9)
    assert np.all(np.diff(per_iteration) > 0)


@settings(max_examples=100, deadline=None)
@given(problem=problems(channel="valkey"), workers=st.integers(2, 60), memory=MEMORIES)
def test_cache_cost_per_iteration_does_not_depend_on_aggregators(problem: Problem, workers: int,
                                                                 memory: int) -> None:
    problem = without_storage_price(problem)
    ks = np.arange(1, workers + 1)
    ev = evaluate(problem, workers, memory, ks, 32, 32)
    per_iteration = ev.cost_exchange_usd / (problem.epochs * ev.iterations_per_epoch)
    expected_gb = problem.workload.model_mb * (3 * workers - 2)  # S_m(3W-2) MB, 1 ECPU per KB
    ecpu_price = problem.prices.require_valkey()[2]
    expected = expected_gb * 1024 / problem.prices.valkey_kb_per_ecpu * ecpu_price
    np.testing.assert_allclose(per_iteration, expected, rtol=1e-9)


@settings(max_examples=100, deadline=None)
@given(problem=problems(), workers=st.integers(2, 50), memory=MEMORIES,
       batch=st.integers(1, 32).map(lambda b: 16 * b))
def test_k_equals_w_is_the_scatterreduce_formula(problem: Problem, workers: int, memory: int,
                                                 batch: int) -> None:
    assume(memory + problem.workload.m > 1.0)
    ev = evaluate(problem, workers, memory, workers, batch, batch)
    wl, pf = problem.workload, problem.platform
    shard = wl.model_mb / workers
    up = float(pf.throughput("up", memory, shard))
    down = float(pf.throughput("down", memory, shard))
    # LambdaML ScatterReduce: upload W shards, gather W-1 shards + publish 1, download W;
    # our runtime keeps its own shard and its own merged shard, so W-1 go each way.
    moved = wl.model_mb - shard if problem.own_shard_local else wl.model_mb
    comm = moved / up + (workers - 1) * shard / down + shard / up + moved / down
    train = wl.a * (batch + wl.b) / (memory + wl.m)
    assert float(ev.iteration_s[0]) == pytest.approx(train + comm, rel=1e-12)
    assert float(ev.global_batch[0]) == workers * batch
    if problem.channel == "s3":
        iterations = problem.epochs * wl.samples / (workers * batch)
        requests = (problem.prices.s3_put * workers**2
                    + problem.prices.s3_get * 2 * workers * (workers - 1))
        assert float(ev.cost_exchange_usd[0]) == pytest.approx(iterations * requests, rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(problem=problems(), workers=st.integers(2, 30), memory=MEMORIES, data=st.data())
def test_alignment_balances_roles(problem: Problem, workers: int, memory: int,
                                  data: st.DataObject) -> None:
    """Unclipped, B^n is the largest batch whose training fits T_train(B^a) + T_agg."""
    assume(memory + problem.workload.m > 1.0)
    unclipped = dataclasses.replace(problem, clip_bn=False)
    aggregators = data.draw(st.integers(1, workers - 1))
    batch = data.draw(st.integers(1, 16)) * 16
    bn = int(aligned_non_aggregator_batch(unclipped, workers, memory, aggregators, batch))
    wl = problem.workload
    _, aggregate, _ = communication_times(problem, np.array([workers]), np.array([memory]),
                                          np.array([aggregators]))
    budget = float(wl.train_time(batch, memory)) + float(aggregate[0])
    assert float(wl.train_time(bn, memory)) <= budget * (1 + 1e-9)
    assert float(wl.train_time(bn + 1, memory)) > budget * (1 - 1e-9)
    clipped = int(aligned_non_aggregator_batch(problem, workers, memory, aggregators, batch))
    assert clipped <= bn
    assert aggregators * batch + (workers - aggregators) * clipped <= problem.max_global_batch \
        or clipped < batch


@given(problem=problems(), memory=MEMORIES, batch=st.integers(1, 32).map(lambda b: 16 * b))
def test_a_single_worker_does_not_communicate(problem: Problem, memory: int, batch: int) -> None:
    ev = evaluate(problem, 1, memory, 1, batch, batch)
    assert ev.upload_s[0] == ev.aggregate_s[0] == ev.download_s[0] == 0.0
    if problem.channel == "s3":
        assert ev.cost_exchange_usd[0] == 0.0
        return
    gb_hour, min_gb, _ = problem.prices.require_valkey()
    assert ev.cost_exchange_usd[0] == pytest.approx(min_gb * ev.time_s[0] / 3600 * gb_hour)


def test_violations_name_the_binding_constraint() -> None:
    problem = Problem(workload=load_workload("resnet50-cifar10"), platform=load_platform("s3"),
                      prices=load_prices(), epochs=10, deadline_s=3000, max_global_batch=1024)
    ev = evaluate(problem, [2, 8, 1, 1, 4], [1536, 10240, 10240, 10240, 10240],
                  [1, 8, 1, 1, 2], [512, 256, 1024, 16, 128], [512, 256, 1024, 16, 64])
    assert [Violation(int(v)) for v in ev.violation] == [
        Violation.MEMORY,        # B = 512 > B_M(1536)
        Violation.GLOBAL_BATCH,  # 8 x 256 > 1024
        Violation.NONE,
        Violation.DEADLINE,      # B = 16 on one worker is far too slow
        Violation.ALIGNMENT,     # B^n < B^a with K < W
    ]


def test_lambda_timeout_splits_long_epochs_into_segments() -> None:
    problem = Problem(workload=load_workload("resnet50-cifar10"), platform=load_platform("s3"),
                      prices=load_prices(), epochs=10, deadline_s=80_000, max_global_batch=1024)
    ev = evaluate(problem, 1, 10240, 1, 1024, 1024)
    per_segment = ev.load_s + ev.checkpoint_s + ev.segment_iterations * ev.iteration_s
    assert per_segment[0] <= problem.timeout_s - problem.timeout_margin_s
    assert ev.segments[0] == np.ceil(10 * ev.iterations_per_epoch[0] / ev.segment_iterations[0])
    assert ev.segments[0] > 1  # ten 190 s epochs do not fit one 900 s invocation
    shorter = dataclasses.replace(problem, timeout_s=300.0)
    assert evaluate(shorter, 1, 10240, 1, 1024, 1024).segments[0] > ev.segments[0]
    # BERT at B=80 trains 17 s per iteration: no iteration fits 60 s minus load and margin.
    tight = dataclasses.replace(problem, workload=load_workload("bert-base-cola"),
                                timeout_s=60.0, timeout_margin_s=30.0, max_global_batch=640)
    assert evaluate(tight, 1, 10240, 1, 80, 80).violation[0] == Violation.LAMBDA_TIMEOUT


def test_a_segment_ceiling_and_overhead_charge_the_runs_time_not_its_workers() -> None:
    """segment_iterations_max splits the run into more segments; each segment's overhead
    (the platform's segment_overhead_s) adds to the run's seconds, and no worker bills it."""
    problem = Problem(workload=load_workload("cnn-digits"), platform=load_platform("s3"),
                      prices=load_prices(), epochs=4, deadline_s=80_000, max_global_batch=128)
    one = evaluate(problem, 4, 1024, 2, 32, 32)
    assert one.segments[0] == 1
    capped = dataclasses.replace(problem, segment_iterations_max=5)
    split = evaluate(capped, 4, 1024, 2, 32, 32)
    assert split.segment_iterations[0] == 5
    assert split.segments[0] == np.ceil(4 * one.iterations_per_epoch[0] / 5)
    slow = dataclasses.replace(capped, platform=dataclasses.replace(capped.platform,
                                                                    segment_overhead_s=3.0))
    charged = evaluate(slow, 4, 1024, 2, 32, 32)
    assert charged.time_s[0] == pytest.approx(split.time_s[0] + 3.0 * split.segments[0])
    assert charged.cost_lambda_usd[0] == pytest.approx(split.cost_lambda_usd[0])


def _with_torch_load(problem: Problem, cpu_s: float) -> Problem:
    return dataclasses.replace(problem, platform=dataclasses.replace(problem.platform,
                                                                     torch_load_cpu_s=cpu_s))


def test_torch_load_is_charged_once_per_run_at_the_vcpu_share() -> None:
    problem = Problem(workload=load_workload("cnn-digits"), platform=load_platform("s3"),
                      prices=load_prices(), epochs=10, deadline_s=80_000, max_global_batch=256)
    memories = [384, 1769, 3538]
    free = evaluate(_with_torch_load(problem, 0.0), 2, memories, 1, 64, 64)
    paid = evaluate(_with_torch_load(problem, 5.0), 2, memories, 1, 64, 64)
    np.testing.assert_array_equal(paid.load_s, free.load_s)  # a warm segment's load
    extra = paid.cold_start_s - free.cold_start_s
    assert extra[1] == pytest.approx(5.0)  # one full vCPU: exactly the CPU-seconds
    assert extra[0] == pytest.approx(5.0 * 1769 / 384)  # a smaller M loads longer
    assert extra[2] == pytest.approx(5.0)  # one thread: a second vCPU does not help
    shipped = evaluate(problem, 2, memories, 1, 64, 64).cold_start_s - free.cold_start_s
    assert shipped[0] > shipped[1] > 0.0  # the shipped profile charges it too
    # many short segments: later ones start warm, so the torch load is paid once
    many = dataclasses.replace(problem, epochs=400, timeout_s=90.0, timeout_margin_s=5.0)
    free = evaluate(_with_torch_load(many, 0.0), 2, memories, 1, 64, 64)
    paid = evaluate(_with_torch_load(many, 5.0), 2, memories, 1, 64, 64)
    assert np.all(paid.segments > 1)
    np.testing.assert_allclose(paid.time_s - free.time_s,
                               extra + (paid.segments - free.segments)
                               * (paid.load_s + paid.checkpoint_s), rtol=1e-9)
    # each segment still has to fit one: a retry starts cold
    assert np.all(paid.segment_iterations <= free.segment_iterations)


@settings(max_examples=100, deadline=None)
@given(problem=problems(), workers=st.integers(1, 40), memory=MEMORIES, data=st.data())
def test_torch_load_grows_the_load_by_its_share(problem: Problem, workers: int, memory: int,
                                                data: st.DataObject) -> None:
    batch = data.draw(st.integers(1, 16)) * 16
    cpu_s = data.draw(st.floats(0.1, 30.0))
    free = evaluate(_with_torch_load(problem, 0.0), workers, memory, 1, batch, batch)
    paid = evaluate(_with_torch_load(problem, cpu_s), workers, memory, 1, batch, batch)
    expected = cpu_s / min(float(lambda_vcpus(memory)), 1.0)
    assert paid.cold_start_s[0] - free.cold_start_s[0] == pytest.approx(expected, rel=1e-9)
    assert paid.time_s[0] >= free.time_s[0]
    assert paid.segment_iterations[0] <= free.segment_iterations[0]


def test_arm64_is_priced_lower_than_x86() -> None:
    wl, prices = load_workload("mobilenet-cifar10"), load_prices()
    x86 = Problem(workload=wl, platform=load_platform("s3", "x86_64"), prices=prices, epochs=5,
                  deadline_s=4000, max_global_batch=512)
    arm = dataclasses.replace(x86, platform=load_platform("s3", "arm64"))
    cost_x86 = evaluate(x86, 3, 1920, 1, 128, 192).cost_lambda_usd[0]
    cost_arm = evaluate(arm, 3, 1920, 1, 128, 192).cost_lambda_usd[0]
    assert cost_arm == pytest.approx(cost_x86 * 1.33334 / 1.66667, rel=1e-4)



@settings(max_examples=60, deadline=None)
@given(problem=problems(), m=st.floats(-9000.0, -200.0), workers=st.integers(2, 16),
       data=st.data())
def test_a_fitted_negative_m_flags_configurations_instead_of_crashing(
        problem: Problem, m: float, workers: int, data: st.DataObject) -> None:
    """Local profiling of a tiny model can fit m < -M (time flat in M). The alignment rule
    then gives B^n < B^a, down to negative batches and global batches; evaluate must mark
    those configurations infeasible, not raise on a negative object size."""
    problem = dataclasses.replace(problem, workload=dataclasses.replace(problem.workload, m=m))
    memory = data.draw(MEMORIES)
    k = data.draw(st.integers(1, workers - 1))
    ba = data.draw(st.integers(1, 64))
    # what the rule gives when M + m is small: around the B^n whose global batch crosses 0
    edge = -(k * ba) // (workers - k)
    bn = data.draw(st.one_of(st.integers(edge - 3, edge + 1), st.integers(-4096, ba - 1)))
    result = evaluate(problem, workers, memory, k, ba, bn)
    assert not result.feasible.any()
