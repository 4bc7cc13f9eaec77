"""The compute model written once (planner/model/inputs/compute.py): the planner's profile, the
profiler's fit and calibrate all predict through it."""

from __future__ import annotations

import numpy as np

from planner.fit.profiler import fit_compute
from planner.model.inputs.compute import predict_train_time
from planner.model.inputs.profiles import load_workload


def test_the_prediction_is_a_b_plus_batch_over_memory_plus_m() -> None:
    batch, memory = np.array([16.0, 64.0, 128.0]), np.array([1024.0, 2048.0, 3008.0])
    predicted = predict_train_time(batch, memory, a=300.0, b=12.0, m=-100.0)
    np.testing.assert_array_equal(predicted, 300.0 * (batch + 12.0) / (memory - 100.0))


def test_no_compute_below_minus_m() -> None:
    predicted = predict_train_time([32, 32], [128, 1024], a=1.0, b=0.0, m=-512.0)
    assert predicted[0] == np.inf and predicted[1] == 32.0 / 512.0


def test_the_profile_predicts_through_it() -> None:
    workload = load_workload("mobilenet-cifar10")
    batch, memory = np.array([32, 256]), np.array([1769, 10240])
    np.testing.assert_array_equal(
        workload.train_time(batch, memory),
        predict_train_time(batch, memory, a=workload.a, b=workload.b, m=workload.m))


def test_the_fit_recovers_what_the_prediction_made() -> None:
    batch = np.array([16.0, 64.0, 256.0] * 3)
    memory = np.repeat([1024.0, 2048.0, 4096.0], 3)
    seconds = predict_train_time(batch, memory, a=900.0, b=20.0, m=300.0)
    a, b, m = fit_compute(batch, memory, seconds)
    np.testing.assert_allclose(predict_train_time(batch, memory, a=a, b=b, m=m), seconds,
                               rtol=1e-6)
