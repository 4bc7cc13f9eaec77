"""Handlers end to end: W worker processes per segment over real S3 (SeaweedFS) and Valkey.

The state machine is played by hand: trigger ``start`` → per segment W separate processes run
``handlers.worker.handler`` with a fake Lambda context → trigger ``next`` → ... → finalize.
All runs share one plan (digits, mlp, W=4, K=2, HAP), so every run must end with the same
weights bit for bit, whatever the channel and whether a worker was killed on the way.
"""

from __future__ import annotations

import hashlib
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

import numpy as np
import pytest
from safetensors.torch import load_file

from fasdl.contract import keys
from fasdl.contract.keys import manifest_key, shard_key
from fasdl.contract.plan import Deployment, Plan, Training, Workload
from fasdl.datasets import build_digits
from fasdl.exchange.shard_layout import shard_bounds
from fasdl.exchange.wire import encode_shard
from fasdl.training.evaluation import confusion_of
from fasdl.training.networks import build_model, parameter_count
from local.servers import RedisTlsClusterServer, SeaweedS3Server, ValkeyServer
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


@pytest.fixture(scope="module")
def s3_store(seaweed_server: SeaweedS3Server, tmp_path_factory: pytest.TempPathFactory
             ) -> SeaweedS3Server:
    return digits_store(seaweed_server, tmp_path_factory.mktemp("digits"))


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
            process.wait()
            log = self._logs.pop(process.pid)
            log.seek(0)
            outcomes.append((process.returncode, log.read().decode(errors="replace")[-3000:]))
            log.close()
        return outcomes

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


def _run_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def s3_stack(s3_store: SeaweedS3Server, tmp_path_factory: pytest.TempPathFactory) -> Stack:
    return Stack(s3_store, digits_plan("s3"), tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def reference(s3_stack: Stack) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    """The undisturbed run over the S3 channel: finalize result, summary, model bytes."""
    result, summary = s3_stack.train(_run_id("reference"))
    return result, summary, s3_stack.read(result["model_key"])


def _evaluate_export(stack: Stack, run_id: str, folder: Path) -> dict[str, Any]:
    """``python -m fasdl.evaluate`` as a user runs it, on the run's model.safetensors (with
    its model.json beside it) and the test split."""
    client = stack.s3.client()
    try:
        for name in ("x", "y"):
            client.download_file(BUCKETS[0], f"{DATASET}/test/{name}.npy",
                                 str(folder / f"{name}.npy"))
    finally:
        client.close()
    for name in ("model.safetensors", "model.json"):
        (folder / name).write_bytes(stack.read(f"runs/{run_id}/{name}"))
    done = subprocess.run([sys.executable, "-m", "fasdl.evaluate",
                           str(folder / "model.safetensors"), str(folder), "--json"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": f"{FUNCTIONS}{os.pathsep}{ROOT}"},
                          check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _plain_torch_accuracy(folder: Path) -> float:
    """The user guide's lines: the registry module, safetensors' loader, load_state_dict;
    then the test split in model.json's evaluation batches."""
    meta = json.loads((folder / "model.json").read_text())
    model = build_model(meta["model"], meta["classes"], tuple(meta["input_shape"]))
    model.load_state_dict(load_file(str(folder / "model.safetensors")))
    x, y = np.load(folder / "x.npy"), np.load(folder / "y.npy")
    confusion = confusion_of(model, x, y, meta["classes"], batch=meta["eval_batch"])
    return confusion.correct / len(y)


@pytest.mark.slow
def test_s3_run_trains_digits_and_finalizes(
        s3_stack: Stack, reference: tuple[dict[str, Any], dict[str, Any], bytes],
        tmp_path: Path) -> None:
    result, summary, model = reference
    run_id = result["run_id"]
    assert [s["iterations"] for s in summary["segments"]] == [29, 29]
    first, last = summary["segments"]
    assert last["loss_mean"] < 0.7 * first["loss_mean"]  # it learns
    assert summary["final_accuracy"] > 0.6  # held-out digits, chance is 0.1
    meta = json.loads(s3_stack.read(f"runs/{run_id}/model.json"))
    assert meta["model"] == "mlp" and meta["input_shape"] == [1, 8, 8]
    assert (meta["classes"], meta["iterations"], meta["run_id"]) == (10, 58, run_id)
    assert meta["parameters"] == parameter_count("mlp", 10, (1, 8, 8))
    assert meta["sha256"] == hashlib.sha256(
        s3_stack.read(f"runs/{run_id}/model.safetensors")).hexdigest()
    weights = np.load(__import__("io").BytesIO(model), allow_pickle=False)
    assert weights.dtype == np.float32 and weights.shape == (meta["parameters"],)
    progress = json.loads(s3_stack.read(f"runs/{run_id}/segments/00001/attempt-0/"
                                        "worker-0000.json"))
    assert progress["iterations_done"] == 29 and progress["accuracy"] is not None
    assert set(progress["time"]) >= {"load_s", "compute_s", "upload_s", "aggregate_s",
                                     "download_s", "idle_s", "checkpoint_s"}
    assert s3_stack.exchange_keys(run_id) == []  # finalize removed the shards
    # the complete model, written into the last checkpoint only, reproduces worker 0's accuracy
    client = s3_stack.s3.client()
    listed = client.list_objects_v2(Bucket=BUCKETS[1], Prefix=f"runs/{run_id}/checkpoint/")
    client.close()
    exports = [item["Key"] for item in listed["Contents"]
               if item["Key"].endswith("/export/model.safetensors")]
    assert len(exports) == 1 and "/it/00000058/" in exports[0], exports
    assert result["extra"]["export_key"] == summary["export_key"] == (
        f"runs/{run_id}/model.safetensors")
    evaluated = _evaluate_export(s3_stack, run_id, tmp_path)
    assert evaluated["accuracy"] == summary["final_accuracy"] and evaluated["model"] == "mlp"
    assert _plain_torch_accuracy(tmp_path) == summary["final_accuracy"]


@pytest.mark.slow
def test_killed_worker_segment_reruns_from_manifest_bitwise(
        s3_stack: Stack, reference: tuple[dict[str, Any], dict[str, Any], bytes]) -> None:
    run_id = _run_id("fault")
    run = s3_stack.invoke("trigger", {"action": "start", "input": {"run_id": run_id},
                                      "execution": run_id})
    assert all(code == 0 for code, _ in s3_stack.segment(run))
    run = s3_stack.invoke("trigger", {"action": "next", "run": run})
    crash = {"FASDL_TEST_CRASH_AT_ITERATION": "40", "FASDL_TEST_CRASH_WORKER": "2"}
    outcomes = s3_stack.segment(run, crash)
    assert outcomes[2][0] == 137, outcomes[2]
    assert all(code != 0 for code, _ in outcomes)  # nobody finishes without worker 2
    client = s3_stack.s3.client()  # no checkpoint for the failed segment
    with pytest.raises(client.exceptions.NoSuchKey):
        client.get_object(Bucket=BUCKETS[1],
                          Key=f"runs/{manifest_key(run_id, 58, run['segment']['epoch'])}")
    client.close()
    retry = s3_stack.invoke("trigger", {"action": "retry", "run": run, "error": {
        "Error": "FasDL.WorkerCrashed", "Cause": "exit status 137"}})
    assert retry["segment"]["attempt"] == 1 and retry["segment"]["epoch"] > run["segment"][
        "epoch"]
    assert all(code == 0 for code, _ in s3_stack.segment(retry))
    done = s3_stack.invoke("trigger", {"action": "next", "run": retry})
    assert done["done"]
    result = s3_stack.invoke("finalize", {"action": "succeeded", "run": done,
                                          "execution": run_id})
    assert s3_stack.read(result["model_key"]) == reference[2]  # bit for bit
    summary = json.loads(s3_stack.read(result["summary_key"]))
    assert summary["retried_attempts"] == 1
    assert [s["attempt"] for s in summary["segments"]] == [0, 1]


@pytest.mark.slow
def test_pipelined_run_trains_the_reference_model_bitwise(
        s3_store: SeaweedS3Server, tmp_path: Path,
        reference: tuple[dict[str, Any], dict[str, Any], bytes]) -> None:
    """Two segments of the pipelined exchange (C = 3) through the handlers: a HAP
    non-aggregator resumes merged l-1 from the checkpoint, and the model is the phased one's."""
    stack = Stack(s3_store, digits_plan("s3", exchange_chunks=3), tmp_path)
    result, summary = stack.train(_run_id("pipelined"))
    assert [s["iterations"] for s in summary["segments"]] == [29, 29]
    assert stack.read(result["model_key"]) == reference[2]  # bit for bit
    assert summary["final_accuracy"] == reference[1]["final_accuracy"]
    assert stack.exchange_keys(result["run_id"]) == []  # finalize removed the chunks


@pytest.mark.slow
@pytest.mark.parametrize("server", ["valkey", "redis-tls-cluster"])
def test_valkey_runs_match_the_s3_run_bitwise(
        server: str, s3_store: SeaweedS3Server, request: pytest.FixtureRequest,
        tmp_path: Path, reference: tuple[dict[str, Any], dict[str, Any], bytes]) -> None:
    if server == "valkey":
        valkey: ValkeyServer | RedisTlsClusterServer = request.getfixturevalue("valkey_server")
        extra = {"FASDL_CACHE_CLUSTER": "0"}
    else:
        valkey = request.getfixturevalue("redis_tls_cluster_server")
        extra = {"FASDL_CACHE_TLS": "1", "FASDL_CACHE_CLUSTER": "1",
                 "FASDL_CACHE_CA_CERTS": str(valkey.ca_cert)}
    stack = Stack(s3_store, digits_plan("valkey"), tmp_path, {
        "FASDL_CACHE_ENDPOINT": "127.0.0.1", "FASDL_CACHE_PORT": str(valkey.port), **extra})
    # one epoch (the override) keeps it short: compare with the reference's first checkpoint
    result, summary = stack.train(_run_id(server), epochs=1)
    assert summary["iterations"] == 29
    reference_run = reference[0]["run_id"]
    # the reference's first segment ran in its first epoch
    assert stack.read(result["model_key"]) == stack.checkpoint_model(reference_run, 29, 1)
    assert summary["final_accuracy"] == reference[1]["segments"][0]["accuracy"]
    client = valkey.client()
    try:
        assert not list(client.scan_iter(match=f"exchange/{result['run_id']}/*"))
    finally:
        client.close()


def test_corrupt_shard_is_rejected(s3_stack: Stack) -> None:
    from fasdl.exchange.wire import FrameError

    run_id = _run_id("corrupt")
    run = s3_stack.invoke("trigger", {"action": "start", "input": {"run_id": run_id},
                                      "execution": run_id})
    start, end = shard_bounds(parameter_count("mlp", 10, (1, 8, 8)), 2)[0]
    epoch = run["segment"]["epoch"]
    client = s3_stack.s3.client()
    for worker in (1, 2, 3):  # what worker 0 aggregates at iteration 0, each one damaged
        frame = bytearray(encode_shard(np.ones(end - start, np.float32),
                                       run=f"{run_id}/{epoch}", iteration=0, worker=worker,
                                       shard=0))
        frame[-1] ^= 0xFF
        client.put_object(Bucket=BUCKETS[2],
                          Key="exchange/" + shard_key(run_id, epoch, 0, 0, worker),
                          Body=bytes(frame))
    client.close()
    event = {"action": "train", "run_id": run_id, "plan_key": run["plan_key"],
             "segment": run["segment"], "worker": 0}
    with pytest.raises(FrameError, match="corrupted frame"):
        s3_stack.invoke("worker", event, remaining_ms=60_000)


def test_worker_without_time_for_an_iteration_fails_fast(s3_stack: Stack) -> None:
    from fasdl.run.segment_runner import SegmentTooLong

    run_id = _run_id("short")
    run = s3_stack.invoke("trigger", {"action": "start", "input": {"run_id": run_id},
                                      "execution": run_id})
    event = {"action": "train", "run_id": run_id, "plan_key": run["plan_key"],
             "segment": run["segment"], "worker": 1}
    began = time.monotonic()
    with pytest.raises(SegmentTooLong, match="retry the segment shorter"):
        s3_stack.invoke("worker", event, remaining_ms=3_000)
    assert time.monotonic() - began < 3.0  # before the deadline, not killed by it
    # it stopped before uploading any shard: only its claim on the epoch is there
    assert s3_stack.exchange_keys(run_id) == [
        f"exchange/{keys.claim_key(run_id, run['segment']['epoch'], 1)}"]
