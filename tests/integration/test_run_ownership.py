"""One run id is one run (issue 41) on the real SeaweedFS S3 server: two executions' starts
racing for one run id; exactly one owns the run, with its own plan, the other gets RunExists."""

from __future__ import annotations

import functools
import io
import threading
from typing import Any

import numpy as np
import pytest

from fasdl.contract.errors import RunExists
from fasdl.contract.plan import Plan
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.run import fencing, run_state
from local.servers.managed import SeaweedS3Server
from tests.runtime.kreduce_helpers import make_plan

PLAN = make_plan(4, 2, 2, 3, "hap", samples=100)
RACES = 6


def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


@pytest.fixture
def bucket(seaweed_server: SeaweedS3Server) -> str:
    client = seaweed_server.client()
    name: str = seaweed_server.buckets[0]
    client.put_object(Bucket=name, Key=f"{PLAN.workload.dataset}/x.npy",
                      Body=_npy(np.zeros((100, 1, 4, 4), np.uint8)))
    client.put_object(Bucket=name, Key=f"{PLAN.workload.dataset}/y.npy",
                      Body=_npy(np.arange(100, dtype=np.int64) % 3))
    return name


def _start(client: Any, bucket: str, runs_prefix: str, run_id: str, execution: str,
           epochs: int) -> object:
    store = S3Channel(bucket, runs_prefix, client=client)
    try:
        return run_state.start_run(
            {"input": {"run_id": run_id, "epochs": epochs}, "execution": execution}, client,
            datasets_bucket=bucket, results_bucket=bucket, runs_prefix=runs_prefix,
            deployed_json=PLAN.to_json(), fingerprint=PLAN.deployment_fingerprint(),
            issue_epoch=functools.partial(fencing.issue_epoch, store))
    except RunExists as error:
        return error


def _race(server: SeaweedS3Server, bucket: str, prefix: str, run_id: str,
          executions: dict[str, int]) -> dict[str, object]:
    """Every execution's start at once (a barrier), each with its own client."""
    outcomes: dict[str, object] = {}
    gate = threading.Barrier(len(executions))

    def go(execution: str, epochs: int) -> None:
        client = server.client()
        gate.wait(10)
        outcomes[execution] = _start(client, bucket, prefix, run_id, execution, epochs)

    threads = [threading.Thread(target=go, args=item) for item in executions.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


def test_racing_starts_one_wins_with_its_own_plan(seaweed_server: SeaweedS3Server,
                                                  bucket: str, prefix: str) -> None:
    executions = {"exec-a": 2, "exec-b": 3}  # different plans: epochs differ
    for race in range(RACES):
        run_id = f"race-{race}"
        outcomes = _race(seaweed_server, bucket, prefix, run_id, executions)
        refused = [name for name, out in outcomes.items() if isinstance(out, RunExists)]
        (winner,) = [name for name, out in outcomes.items() if isinstance(out, dict)]
        assert len(refused) == 1 and f"execution {winner!r}" in str(outcomes[refused[0]])
        client = seaweed_server.client()
        body = client.get_object(Bucket=bucket, Key=f"{prefix}{run_id}/plan.json")["Body"]
        plan = Plan.from_json(body.read().decode())
        assert plan.run is not None and plan.run.execution == winner
        assert plan.training.epochs == executions[winner]
        assert fencing.read_epoch(S3Channel(bucket, prefix, client=client), run_id) == 1
