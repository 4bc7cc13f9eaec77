"""Fencing: a dead attempt's objects never reach a later one (issue: exactly-once training).

Driven through the contract the state machine uses: the trigger's actions make the run
states, each worker runs ``segment_runner.run_segment`` on the event built from them, and
finalize writes ``model.npy``. Everything lives in one in-memory S3 (moto), exchange
included, as on AWS, so a dead attempt's leftovers are there for a later attempt to find.
"""

from __future__ import annotations

import dataclasses
import io
import multiprocessing
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fasdl.contract.plan import Plan
from fasdl.contract.settings import Settings
from fasdl.exchange import stores, wire
from fasdl.run import segment_runner
from tests.lambda_context import FakeLambdaContext
from tests.runtime.conftest import DATASETS, EXCHANGE, RESULTS
from tests.runtime.kreduce_helpers import make_plan

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
if str(FUNCTIONS) not in sys.path:  # handlers/ is the Lambda asset root, not a package
    sys.path.insert(0, str(FUNCTIONS))

from handlers import finalize, trigger  # noqa: E402

SEGMENT = 4  # iterations per segment; 8 in all


def _plan(sync: str) -> Plan:
    plan = make_plan(2, 1, 4, 4, sync, samples=64, model="cnn")
    return dataclasses.replace(plan, training=dataclasses.replace(
        plan.training, epochs=1, segment_iterations=SEGMENT))


def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


@pytest.fixture(autouse=True)
def _deterministic_torch() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def s3_env(tmp_path: Path) -> dict[str, str]:  # tests/runtime/conftest.py's s3, no deployment
    return {"FASDL_CACHE_DIR": str(tmp_path / "cache"), "FASDL_PEER_WAIT_START_S": "20",
            "FASDL_FENCE_CHECK_S": "0"}


@pytest.fixture
def s3_objects() -> dict[tuple[str, str], bytes]:  # the test split of the plans' dataset
    rng = np.random.default_rng(3)
    return {(DATASETS, "data/test/x.npy"): _npy(rng.integers(0, 256, (64, 1, 8, 8),
                                                             dtype=np.uint8)),
            (DATASETS, "data/test/y.npy"): _npy(rng.integers(0, 4, 64).astype(np.int64))}


@pytest.fixture
def s3_over_http() -> bool:  # the workers' frames are bytearrays: moto as a server
    return True


def _invoke(run: dict[str, Any], worker: int) -> None:
    event = segment_runner.WorkerEvent.parse({
        "run_id": run["run_id"], "plan_key": run["plan_key"], "segment": run["segment"],
        "worker": worker})
    segment_runner.run_segment(Settings.from_env(), event, lambda: 600.0)


def _train(run: dict[str, Any], *, workers: int = 2) -> None:
    """One segment: every worker's invocation, each its own process as on Lambda (threads
    would share torch's global RNG, which seeding and restores set)."""
    context = multiprocessing.get_context("fork")  # the S3 server stays in this process
    processes = [context.Process(target=_invoke, args=(run, worker))
                 for worker in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    assert [process.exitcode for process in processes] == [0] * workers


def _action(name: str, run: dict[str, Any]) -> dict[str, Any]:
    return trigger.handler({"action": name, "run": run}, FakeLambdaContext())


def _finish(run: dict[str, Any]) -> bytes:
    while not run["done"]:
        _train(run)
        run = _action("next", run)
    out = finalize.handler({"action": "succeeded", "run": run, "execution": "e"},
                           FakeLambdaContext())
    model: bytes = stores.s3_client(Settings.from_env()).get_object(
        Bucket=RESULTS, Key=out["model_key"])["Body"].read()
    return model


def _poison_merged_frames(s3: Any, run_id: str) -> int:
    """Halve the values of every merged shard the run left on the exchange, keeping each
    frame intact (header and checksum valid): what a diverged attempt would have written."""
    poisoned = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=EXCHANGE,
                                                             Prefix=f"exchange/{run_id}/"):
        for item in page.get("Contents", []):
            if "/merged/" not in item["Key"]:
                continue
            frame = s3.get_object(Bucket=EXCHANGE, Key=item["Key"])["Body"].read()
            header = wire.read_header(frame)
            values = np.frombuffer(frame, dtype=header.dtype, offset=wire.HEADER_SIZE) * 0.5
            s3.put_object(Bucket=EXCHANGE, Key=item["Key"], Body=wire.reframe(frame, values))
            poisoned += 1
    return poisoned


@pytest.mark.parametrize("sync", ["bsp", "hap"])
def test_a_later_segment_never_reads_a_dead_attempts_merged_shards(s3: Any,
                                                                   sync: str) -> None:
    """Attempt 0 of [0, 4) "times out" after leaving merged shards of iterations 2 and 3; the
    segment is shortened to [0, 2), and the next segment [2, 4) must not load them."""
    plan = _plan(sync)
    undisturbed = _finish(trigger.handler(
        {"action": "start", "input": {"run_id": f"calm-{sync}", "plan": plan.to_dict()},
         "execution": f"calm-{sync}"}, FakeLambdaContext()))

    # one run id per parameter: the store outlives a test, and a run id is one run
    run = trigger.handler({"action": "start",
                           "input": {"run_id": f"hit-{sync}", "plan": plan.to_dict()},
                           "execution": f"hit-{sync}"}, FakeLambdaContext())
    _train(run)  # the attempt the state machine gives up on (say, its Map timed out)
    assert _poison_merged_frames(s3, f"hit-{sync}") >= 1  # its leftovers differ from a replay's
    run = _action("shorten", run)
    assert (run["segment"]["start_iteration"], run["segment"]["iterations"]) == (0, 2)
    assert _finish(run) == undisturbed
