"""Per-role memory: M_B = k·B + c plus each role's exchange buffers
(planner/model/terms/memory.py)."""

from __future__ import annotations

import dataclasses

import numpy as np

from fasdl.exchange.inflight import exchange_memory_mb
from planner.model.inputs.problem import Problem, Violation
from planner.model.inputs.profiles import load_platform, load_prices, load_workload
from planner.model.terms.cost_model import aligned_non_aggregator_batch, evaluate
from planner.model.terms.memory import role_max_batch, role_memory_mb


def problem(name: str = "resnet50-cifar10", **changes: object) -> Problem:
    base = Problem(workload=load_workload(name), platform=load_platform("s3"),
                   prices=load_prices(), epochs=1, deadline_s=1e8, max_global_batch=4096)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_each_role_adds_its_exchange_buffers() -> None:
    wl = load_workload("resnet50-cifar10")
    memory, workers, aggregators = np.array([3584, 3584]), np.array([2, 8]), np.array([1, 4])
    aggregator, non_aggregator = role_memory_mb(wl, memory, workers, aggregators, 128, 160)
    extra_a, extra_n = exchange_memory_mb(wl.model_mb, memory, workers, aggregators)
    np.testing.assert_allclose(aggregator, wl.k * 128 + wl.c + extra_a)
    np.testing.assert_allclose(non_aggregator, wl.k * 160 + wl.c + extra_n)
    assert np.all(extra_a > extra_n)  # the float64 accumulator is the aggregator's alone


def test_paper_mode_is_the_thesis_formula() -> None:
    wl = load_workload("mobilenet-cifar10")
    memory = np.arange(512, 4097, 128)
    max_a, max_n = role_max_batch(wl, memory, 4, 2, enabled=False)
    np.testing.assert_array_equal(max_a, wl.max_batch(memory))
    np.testing.assert_array_equal(max_n, wl.max_batch(memory))


def test_a_batch_that_fits_only_without_the_buffers_is_a_memory_violation() -> None:
    wl = load_workload("resnet50-cifar10")
    memory = 1536
    batch = int(wl.max_batch(memory))  # fits k·B + c exactly
    for exchange, expected in ((False, Violation.NONE), (True, Violation.MEMORY)):
        ev = evaluate(problem(exchange_memory=exchange), 2, memory, 1, batch, batch)
        assert ev.violation[0] == expected


def test_aligned_non_aggregator_batch_is_clipped_to_its_role() -> None:
    p = problem("squeezenet-cifar10")
    memory, workers, aggregators = np.array([768, 1024]), np.array([4, 4]), np.array([1, 1])
    bn = aligned_non_aggregator_batch(p, workers, memory, aggregators, np.array([128, 128]))
    _, max_n = role_max_batch(p.workload, memory, workers, aggregators)
    assert np.all(bn <= max_n)
    paper = aligned_non_aggregator_batch(dataclasses.replace(p, exchange_memory=False),
                                         workers, memory, aggregators, np.array([128, 128]))
    assert np.all(bn <= paper)
