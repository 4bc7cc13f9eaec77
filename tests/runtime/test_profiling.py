"""The profiler for real, in-process: a small model on digits shapes, transfers through a real
SeaweedFS, the handler's two actions, and samples that ``planner fit`` accepts.

A SMOKE TEST of the pipeline only: one machine has one real memory size, so the two
"memories" here are labels (passed as the function context) with different torch thread
counts. Real M-dependent coefficients need the profiling state machine on Lambda.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from fasdl.profiling import measure as profiling
from local.servers.managed import SeaweedS3Server, ServerBinaryMissing
from planner.commands.cli import main
from planner.commands.cli_inputs import EXIT_OK
from planner.model.inputs.profiles import load_platform_file, load_workload
from tests.lambda_context import FakeLambdaContext

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
if str(FUNCTIONS) not in sys.path:  # handlers/ is the Lambda asset root, not a package
    sys.path.insert(0, str(FUNCTIONS))

RESULTS, EXCHANGE = "results", "exchange"
EVENT = {"action": "profile", "profile_id": "smoke", "model": "cnn", "dataset": "digits",
         "batches": [8, 64, 256], "warmup": 1, "repeats": 3, "sizes_mb": [0.05, 0.5, 2],
         "transfer_repeats": 2}


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedS3Server]:
    try:
        server = SeaweedS3Server(buckets=(RESULTS, EXCHANGE))
    except ServerBinaryMissing as missing:  # the venv ships it: a missing binary is a failure
        pytest.fail(str(missing), pytrace=False)
    with server:
        yield server


@pytest.fixture
def lambda_env(seaweed: SeaweedS3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "FASDL_STACK": "Smoke", "FASDL_CHANNEL": "s3", "FASDL_DATASETS_BUCKET": "datasets",
        "FASDL_RESULTS_BUCKET": RESULTS, "FASDL_EXCHANGE_BUCKET": EXCHANGE,
        "FASDL_EXCHANGE_PREFIX": "exchange/", "FASDL_PROFILES_PREFIX": "profiles/",
        "FASDL_S3_PATH_STYLE": "1", "AWS_ENDPOINT_URL_S3": seaweed.endpoint_url,
        "AWS_ACCESS_KEY_ID": seaweed.access_key, "AWS_SECRET_ACCESS_KEY": seaweed.secret_key,
        "AWS_DEFAULT_REGION": seaweed.region,
    }.items():
        monkeypatch.setenv(name, value)


def invoke(event: dict[str, Any], memory_mb: int | None = None) -> dict[str, Any]:
    from handlers import profiler

    result: dict[str, Any] = profiler.handler(event, FakeLambdaContext(memory_mb=memory_mb))
    return result


@pytest.mark.usefixtures("lambda_env")
def test_profile_collect_and_fit(seaweed: SeaweedS3Server, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        for memory, count in ((1024, 1), (2048, 2)):  # emulated memories: thread counts
            torch.set_num_threads(count)
            summary = invoke({**EVENT, "memory_mb": memory}, memory)
            assert summary["key"] == f"profiles/smoke/memory-{memory}.jsonl"
            # 3 batches + sizes x repeats x up/down + repeats duplex tests
            assert summary["records"] == 3 + 3 * 2 * 2 + 2
    finally:
        torch.set_num_threads(threads)
    collected = invoke({"action": "collect", "profile_id": "smoke", "memories": [2048, 1024]})
    assert collected["samples_key"] == "profiles/smoke/samples.jsonl"
    assert collected["lines"] == 2 * 17
    client = seaweed.client()
    text = client.get_object(Bucket=RESULTS, Key=collected["samples_key"])["Body"].read()
    assert not client.list_objects_v2(Bucket=EXCHANGE).get("Contents")  # transfers cleaned up
    records = [json.loads(line) for line in text.decode().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["batch"] for r in train] == [8, 64, 256, 8, 64, 256]
    assert all(r["peak_mb"] > 50 and r["model"] == "cnn" for r in train)
    # each step's CPU is metered: a batch of 256 costs more than one of 8
    assert all(r["cpu_s"] >= 0 for r in train) and train[2]["cpu_s"] > train[0]["cpu_s"]
    samples = tmp_path / "samples.jsonl"
    samples.write_bytes(text)

    out = tmp_path / "smoke.json"
    code = main(["fit", "--samples", str(samples), "--out", str(out), "--name", "smoke-cnn",
                 "--dataset", "datasets/digits", "--dataset-samples", "1437",
                 "--dataset-mb", "0.09"])
    report = capsys.readouterr()
    assert code == EXIT_OK, report.err
    workload = load_workload(str(tmp_path / "smoke-workload.json"))
    platform = load_platform_file(tmp_path / "smoke-platform.json")
    assert workload.model == "cnn" and workload.k > 0 and workload.cpu_sample_s > 0
    assert platform.channel == "s3" and platform.memory_mb == (1024.0, 2048.0)
    duplex = [r for r in records if r["kind"] == "duplex"]
    assert len(duplex) == 4 and all(r["seconds"] > 0 and r["downloads"] >= 1 for r in duplex)
    assert len(platform.duplex) == 2 and all(0.0 <= d <= 1.0 for d in platform.duplex)
    # every transfer meters its CPU (framing, checksums, the client), a download its fold too,
    # and the fit turns them into the profile's per-request and per-MB CPU
    transfer = [r for r in records if r["kind"] == "transfer"]
    assert all(r["cpu_s"] > 0 for r in transfer)
    assert all(r["fold_cpu_s"] >= 0 for r in transfer if r["direction"] == "down")
    assert platform.cpu_up_request_s + platform.cpu_up_mb_s > 0
    assert platform.cpu_down_request_s + platform.cpu_down_mb_s > 0
    assert platform.cpu_fold_mb_s >= 0
    # the bfloat16 codec's arithmetic, once per size: framing on the way up, folding down
    for direction, name in (("up", "bf16_frame_cpu_s"), ("down", "bf16_fold_cpu_s")):
        metered = [r for r in transfer if r["direction"] == direction and name in r]
        assert len(metered) == 2 * 3 and all(r[name] >= 0 for r in metered)  # 2 M x 3 sizes
    assert platform.cpu_bf16_frame_mb_s > 0 and platform.cpu_bf16_fold_mb_s > 0


@pytest.mark.usefixtures("lambda_env")
def test_wrong_memory_and_unreachable_channel_are_refused() -> None:
    with pytest.raises(profiling.ProfileRequestError, match="'memory_mb'"):
        invoke({**EVENT, "memory_mb": 4096}, 1024)
    with pytest.raises(profiling.ProfileRequestError, match=r"'channels'.*valkey"):
        invoke({**EVENT, "channels": ["valkey"]}, 1024)
    with pytest.raises(RuntimeError, match="no samples for 3008 MB"):
        invoke({"action": "collect", "profile_id": "never", "memories": [3008]})


@pytest.mark.parametrize("event,field", [
    ({}, "profile_id"),
    ({"profile_id": "x", "model": "vgg"}, "model"),
    ({"profile_id": "x", "batches": [0]}, "batches"),
    ({"profile_id": "x", "batches": []}, "batches"),
    ({"profile_id": "x", "sizes_mb": [1024]}, "sizes_mb"),
    ({"profile_id": "x", "input_shape": [3, 0, 32]}, "input_shape"),
    ({"profile_id": "x", "input_shape": [1, 2, 3, 4, 5]}, "input_shape"),
    ({"profile_id": "x", "dataset": "imagenet"}, "dataset"),
    ({"profile_id": "x", "channels": ["ftp"]}, "channels"),
])
def test_bad_events_name_the_field(event: dict[str, Any], field: str) -> None:
    with pytest.raises(profiling.ProfileRequestError, match=f"'{field}'"):
        profiling.ProfileRequest.from_event(event)


def test_defaults_and_dataset_shapes() -> None:
    request = profiling.ProfileRequest.from_event(
        {"profile_id": "p", "dataset": "digits", "batches": [64, 8, 8]})
    assert request.input_shape == (1, 8, 8) and request.batches == (8, 64)
    assert request.sizes_mb == profiling.ProfileRequest("p").sizes_mb


def test_peak_memory_is_read() -> None:
    before = profiling.peak_rss_mb()
    block = bytearray(64 * 2**20)  # touch 64 MiB
    block[::4096] = b"x" * len(block[::4096])
    assert profiling.peak_rss_mb() >= before
    assert profiling.peak_rss_mb() > 64
