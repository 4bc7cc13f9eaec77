"""A run-level check of ``normalize``: a worker (the trigger's run state, run_segment, S3
through moto) trains and evaluates on rows normalised with the plan's
``workload.normalization``, step for step as the single-process reference does it."""

from __future__ import annotations

import dataclasses
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fasdl.contract.plan import Plan
from fasdl.contract.settings import Settings
from fasdl.datasets.meta import channel_statistics
from fasdl.run import segment_runner
from fasdl.training.data import Partition
from local.run.reference import reference_curve
from tests.lambda_context import FakeLambdaContext
from tests.runtime.conftest import DATASETS
from tests.runtime.kreduce_helpers import make_plan

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
if str(FUNCTIONS) not in sys.path:  # handlers/ is the Lambda asset root, not a package
    sys.path.insert(0, str(FUNCTIONS))

from handlers import trigger  # noqa: E402

RNG = np.random.default_rng(11)
TRAIN = (RNG.integers(0, 256, (64, 1, 8, 8), dtype=np.uint8), RNG.integers(0, 3, 64))
TEST = (RNG.integers(0, 256, (32, 1, 8, 8), dtype=np.uint8), RNG.integers(0, 3, 32))


def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


def _plan(augmentation: str) -> Plan:
    """One worker (K = 1, bsp, SGD): the run is the reference up to float rounding."""
    plan = make_plan(1, 1, 8, 8, "bsp", samples=64, model="mlp")
    statistics = channel_statistics(TRAIN[0])
    assert statistics is not None
    return dataclasses.replace(
        plan, workload=dataclasses.replace(plan.workload, normalization={
            "mean": statistics[0], "std": statistics[1]}),
        training=dataclasses.replace(plan.training, epochs=2, augmentation=augmentation))


@pytest.fixture(autouse=True)
def _deterministic_torch() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def s3_env(tmp_path: Path) -> dict[str, str]:
    return {"FASDL_CACHE_DIR": str(tmp_path / "cache"), "FASDL_FENCE_CHECK_S": "0"}


@pytest.fixture
def s3_objects() -> dict[tuple[str, str], bytes]:
    arrays = {"x.npy": TRAIN[0], "y.npy": TRAIN[1].astype(np.int64),
              "test/x.npy": TEST[0], "test/y.npy": TEST[1].astype(np.int64)}
    return {(DATASETS, f"data/test/{name}"): _npy(array) for name, array in arrays.items()}


@pytest.fixture
def s3_over_http() -> bool:  # the worker's frames are bytearrays: moto as a server
    return True


def test_a_worker_trains_and_evaluates_on_normalised_rows(s3: Any) -> None:
    plan = _plan("normalize")
    run = trigger.handler({"action": "start", "input": {"run_id": "norm",
                                                        "plan": plan.to_dict()},
                           "execution": "norm"}, FakeLambdaContext())
    assert run["segment"]["iterations"] == plan.total_iterations == 16
    event = segment_runner.WorkerEvent.parse({
        "run_id": run["run_id"], "plan_key": run["plan_key"], "segment": run["segment"],
        "worker": 0})
    result = segment_runner.run_segment(Settings.from_env(), event, lambda: 600.0)
    train, test = Partition(TRAIN[0], TRAIN[1]), Partition(TEST[0], TEST[1])
    (reference,) = reference_curve(plan, train, test, [plan.total_iterations])
    (unnormalised,) = reference_curve(_plan("none"), train, test, [plan.total_iterations])
    assert result["loss_mean"] == pytest.approx(reference["loss_mean"], rel=1e-4)
    assert abs(unnormalised["loss_mean"] - reference["loss_mean"]) > 1e-2
    assert result["accuracy"] == reference["accuracy"] and result["test_samples"] == 32
