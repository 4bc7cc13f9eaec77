"""The trigger and finalize handlers against conftest's in-memory S3 (moto), deployed with one
small plan and its dataset: shared by test_handlers.py, test_guards.py and
test_console_resume.py. A module takes the deployment by importing ``s3_env`` and
``s3_objects``, which override conftest's fixtures of the same names."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.lambda_context import FakeLambdaContext
from tests.runtime.conftest import DATASETS, RESULTS, deployed_env
from tests.runtime.kreduce_helpers import make_plan

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
if str(FUNCTIONS) not in sys.path:  # handlers/ is the Lambda asset root, not a package
    sys.path.insert(0, str(FUNCTIONS))

from handlers import finalize, trigger  # noqa: E402

__all__ = ["FUNCTIONS", "PLAN", "finalize", "read_json", "s3_env", "s3_objects", "start",
           "trigger"]

PLAN = make_plan(4, 2, 2, 3, "hap", samples=100)  # B^g 10: 10 iterations per epoch


def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


@pytest.fixture
def s3_env() -> dict[str, str]:  # tests/runtime/conftest.py's s3, deployed with PLAN
    return deployed_env(PLAN)


@pytest.fixture
def s3_objects() -> dict[tuple[str, str], bytes]:  # PLAN's dataset
    prefix = PLAN.workload.dataset
    return {(DATASETS, f"{prefix}/x.npy"): _npy(np.zeros((100, 1, 4, 4), np.uint8)),
            (DATASETS, f"{prefix}/y.npy"): _npy(np.arange(100, dtype=np.int64) % 3)}


def read_json(s3: Any, key: str, bucket: str = RESULTS) -> Any:
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def start(event_input: dict[str, Any], execution: str = "exec-1") -> dict[str, Any]:
    return trigger.handler({"action": "start", "input": event_input, "execution": execution},
                           FakeLambdaContext())
