"""The environment a deployed stack gives the functions, pointed at local servers: the digits
plan and store every worker test shares, and the state machine played by hand (W worker
processes per segment), for test_workers.py and test_leftovers.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fasdl.contract.keys import manifest_key
from fasdl.contract.plan import Deployment, Plan, Training, Workload
from fasdl.datasets import build_digits
from local.servers.managed import SeaweedS3Server
from tests.lambda_context import FakeLambdaContext

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"
if str(FUNCTIONS) not in sys.path:  # handlers/ is the Lambda asset root, not a package
    sys.path.insert(0, str(FUNCTIONS))

BUCKETS = ("fasdl-datasets", "fasdl-results", "fasdl-exchange")
DATASET = "datasets/digits"
WORKERS = 4
# A worker process: the handler with a fake context whose deadline is REMAINING_MS away.
WORKER_MAIN = """
import json, sys
from handlers.worker import handler
from tests.lambda_context import FakeLambdaContext
event = json.loads(sys.argv[1])
print(json.dumps(handler(event, FakeLambdaContext(int(sys.argv[2])))))
"""


def digits_plan(channel: str, exchange_chunks: int = 1) -> Plan:
    # 1437 training digits / B^g 48 = 29 iterations per epoch; one epoch per segment
    return Plan(
        workload=Workload(name="digits", model="mlp", dataset=DATASET, samples=1437,
                          dataset_mb=0.1, model_mb=0.07),
        deployment=Deployment(channel=channel, arch="x86_64", memory_mb=1024, workers=WORKERS),
        training=Training(aggregators=2, batch_aggregator=8, batch_non_aggregator=16,
                          max_global_batch=1000, epochs=2, segment_iterations=29, sync="hap",
                          learning_rate=0.1, momentum=0.9, exchange_chunks=exchange_chunks))


def digits_store(seaweed_server: SeaweedS3Server, out: Path) -> SeaweedS3Server:
    """The three stack buckets with the digits dataset (train at the prefix, test/ below)."""
    for bucket in BUCKETS:
        seaweed_server.create_bucket(bucket)
    build_digits(out)
    client = seaweed_server.client()
    for split, prefix in (("train", DATASET), ("test", f"{DATASET}/test")):
        for name in ("x", "y"):
            client.upload_file(str(out / split / f"{name}.npy"), BUCKETS[0],
                               f"{prefix}/{name}.npy")
    client.close()
    return seaweed_server


@dataclass
class Stack:
    """The environment a deployed stack would give the functions, pointed at local servers."""

    s3: SeaweedS3Server
    plan: Plan
    cache_dir: Path
    channel_env: dict[str, str] = field(default_factory=dict)
    _logs: dict[int, Any] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {
            "FASDL_STACK": "fasdl-test", "FASDL_CHANNEL": self.plan.deployment.channel,
            "FASDL_DEPLOYMENT": self.plan.deployment_fingerprint(),
            "FASDL_DATASETS_BUCKET": BUCKETS[0], "FASDL_RESULTS_BUCKET": BUCKETS[1],
            "FASDL_EXCHANGE_BUCKET": BUCKETS[2], "FASDL_EXCHANGE_PREFIX": "exchange/",
            "FASDL_RUNS_PREFIX": "runs/", "FASDL_METRICS_NAMESPACE": "FasDL",
            "FASDL_PLAN": json.dumps(self.plan.to_dict()),
            "FASDL_CACHE_DIR": str(self.cache_dir), "FASDL_S3_PATH_STYLE": "1",
            "AWS_ENDPOINT_URL_S3": self.s3.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.s3.access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3.secret_key, "AWS_DEFAULT_REGION": self.s3.region,
            **self.channel_env,
        }

    @contextmanager
    def environ(self) -> Iterator[None]:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in self.env().items():
                patch.setenv(name, value)
            yield

    def invoke(self, function: str, event: dict[str, Any],
               remaining_ms: int = 600_000) -> dict[str, Any]:
        """One in-process invocation of the trigger, finalize or a worker."""
        with self.environ():
            module = __import__(f"handlers.{function}", fromlist=["handler"])
            result: dict[str, Any] = module.handler(event, FakeLambdaContext(remaining_ms))
            return result

    def spawn(self, event: dict[str, Any], extra_env: dict[str, str] | None = None,
              remaining_ms: int = 600_000) -> subprocess.Popen[bytes]:
        env = {**os.environ, **self.env(), **(extra_env or {}), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": f"{FUNCTIONS}{os.pathsep}{ROOT}"}
        # output to a file: a full pipe would block a worker that logs a lot
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in segment()
        process = subprocess.Popen([sys.executable, "-c", WORKER_MAIN, json.dumps(event),
                                    str(remaining_ms)], env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
        self._logs[process.pid] = log
        return process

    def segment(self, run: dict[str, Any], crash: dict[str, str] | None = None
                ) -> list[tuple[int, str]]:
        """Run W worker processes for ``run.segment``; (exit code, stderr tail) per worker."""
        processes = [self.spawn({"action": "train", "run_id": run["run_id"],
                                 "plan_key": run["plan_key"], "segment": run["segment"],
                                 "worker": worker}, crash) for worker in run["workers"]]
        outcomes: list[tuple[int, str]] = []
        deadline = time.monotonic() + 120
        while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
            if crash and any(p.poll() == 137 for p in processes):
                break  # the crashed peer never uploads: stop the survivors like a timeout
            time.sleep(0.05)
        for process in processes:
            if process.poll() is None:
                process.kill()
            outcomes.append(self.finish(process))
        return outcomes

    def finish(self, process: subprocess.Popen[bytes], timeout_s: float = 120
               ) -> tuple[int, str]:
        """Wait for a spawned worker: (exit code, the tail of its output)."""
        process.wait(timeout_s)
        log = self._logs.pop(process.pid)
        log.seek(0)
        tail = log.read().decode(errors="replace")[-3000:]
        log.close()
        return process.returncode, tail

    def read(self, key: str) -> bytes:
        client = self.s3.client()
        try:
            body: bytes = client.get_object(Bucket=BUCKETS[1], Key=key)["Body"].read()
            return body
        finally:
            client.close()

    def exchange_keys(self, run_id: str) -> list[str]:
        client = self.s3.client()
        try:
            page = client.list_objects_v2(Bucket=BUCKETS[2], Prefix=f"exchange/{run_id}/")
            return [item["Key"] for item in page.get("Contents", [])]
        finally:
            client.close()

    def checkpoint_model(self, run_id: str, resume_iteration: int, epoch: int) -> bytes:
        key = manifest_key(run_id, resume_iteration, epoch)
        manifest = json.loads(self.read(f"runs/{key}"))
        return self.read("runs/" + manifest["objects"]["model"]["key"])

    def train(self, run_id: str, **overrides: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """A whole run as the state machine drives it; (finalize result, summary)."""
        run = self.invoke("trigger", {"action": "start",
                                      "input": {"run_id": run_id, **overrides},
                                      "execution": run_id})
        while not run["done"]:
            outcomes = self.segment(run)
            assert all(code == 0 for code, _ in outcomes), outcomes
            run = self.invoke("trigger", {"action": "next", "run": run})
        result = self.invoke("finalize", {"action": "succeeded", "run": run,
                                          "execution": f"arn:aws:states:::execution:m:{run_id}"})
        return result, json.loads(self.read(result["summary_key"]))


def unique_run_id(name: str) -> str:
    """``name`` with a random suffix: runs sharing a store never collide."""
    return f"{name}-{uuid.uuid4().hex[:8]}"
