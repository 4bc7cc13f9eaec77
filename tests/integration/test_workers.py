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
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.torch import load_file

from fasdl.contract import keys
from fasdl.contract.keys import manifest_key, shard_key
from fasdl.exchange.shard_layout import shard_bounds
from fasdl.exchange.wire import encode_shard
from fasdl.training.evaluation import confusion_of
from fasdl.training.networks import build_model, parameter_count
from local.servers.managed import RedisTlsClusterServer, SeaweedS3Server, ValkeyServer
from tests.integration.worker_stack import (
    BUCKETS,
    DATASET,
    FUNCTIONS,
    ROOT,
    Stack,
    digits_plan,
    digits_store,
    unique_run_id,
)


@pytest.fixture(scope="module")
def s3_store(seaweed_server: SeaweedS3Server, tmp_path_factory: pytest.TempPathFactory
             ) -> SeaweedS3Server:
    return digits_store(seaweed_server, tmp_path_factory.mktemp("digits"))


@pytest.fixture(scope="module")
def s3_stack(s3_store: SeaweedS3Server, tmp_path_factory: pytest.TempPathFactory) -> Stack:
    return Stack(s3_store, digits_plan("s3"), tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def reference(s3_stack: Stack) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    """The undisturbed run over the S3 channel: finalize result, summary, model bytes."""
    result, summary = s3_stack.train(unique_run_id("reference"))
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
    run_id = unique_run_id("fault")
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
    result, summary = stack.train(unique_run_id("pipelined"))
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
    result, summary = stack.train(unique_run_id(server), epochs=1)
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

    run_id = unique_run_id("corrupt")
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

    run_id = unique_run_id("short")
    run = s3_stack.invoke("trigger", {"action": "start", "input": {"run_id": run_id},
                                      "execution": run_id})
    event = {"action": "train", "run_id": run_id, "plan_key": run["plan_key"],
             "segment": run["segment"], "worker": 1}
    began = time.monotonic()
    with pytest.raises(SegmentTooLong, match="retry the segment shorter"):
        s3_stack.invoke("worker", event, remaining_ms=3_000)
    # A hang bound only (10x the 3 s it was given): in-process nothing kills it at the
    # deadline, and a loaded machine may spend seconds loading. What shows it failed fast is
    # below: it stopped before uploading any shard, only its claim on the epoch is there.
    assert time.monotonic() - began < 30.0
    assert s3_stack.exchange_keys(run_id) == [
        f"exchange/{keys.claim_key(run_id, run['segment']['epoch'], 1)}"]


def test_a_fenced_zombie_deletes_what_it_wrote_in_its_dead_epoch(s3_stack: Stack) -> None:
    """Issue 41: a zombie's keys written after its epoch was cleaned outlived the run's
    cleanups. Worker 1 of epoch 1 uploads its shards and waits for peers that never come;
    meanwhile epoch 2 is issued (without the trigger's cleanup of epoch 1, as if the zombie
    wrote after it). Its wait ends, it finds itself fenced and deletes its epoch's keys."""
    from fasdl.exchange.channel.s3 import S3Channel
    from fasdl.run.fencing import issue_epoch

    run_id = unique_run_id("zombie")
    run = s3_stack.invoke("trigger", {"action": "start", "input": {"run_id": run_id},
                                      "execution": run_id})
    # its wait must outlast the test's epoch issue below: 4 s once ended first in the
    # parallel pass (a ChannelTimeout before the fence moved, not a WorkerFenced)
    zombie = s3_stack.spawn({"action": "train", "run_id": run_id, "plan_key": run["plan_key"],
                             "segment": run["segment"], "worker": 1},
                            {"FASDL_PEER_WAIT_START_S": "12"})
    deadline = time.monotonic() + 60
    while len(s3_stack.exchange_keys(run_id)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # its claim, then its shards for worker 0
    written = s3_stack.exchange_keys(run_id)
    assert len(written) >= 2 and all(f"/{run_id}/1/" in key for key in written), written
    client = s3_stack.s3.client()
    try:
        assert issue_epoch(S3Channel(BUCKETS[1], "runs/", client=client), run_id,
                           supersedes=1, call="retry") == 2
    finally:
        client.close()
    code, output = s3_stack.finish(zombie)
    assert code != 0 and "WorkerFenced" in output, output
    assert s3_stack.exchange_keys(run_id) == []
