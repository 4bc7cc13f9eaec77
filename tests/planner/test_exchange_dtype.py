"""bfloat16 uploads in the planner: half-size shards up and into the aggregators, float32 merged
shards, the codec's state in memory and checkpoints, and the plan that asks for them."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from fasdl.contract.plan import Plan
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.inflight import exchange_memory_mb
from fasdl.training.networks import build_model
from planner.commands.cli import main
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import load_platform, load_prices, load_workload
from planner.model.terms.cost_model import evaluate
from planner.model.terms.exchange_cost import exchange_bytes_per_iteration_mb
from planner.model.terms.exchange_time import communication_times, non_aggregator_times
from planner.model.terms.segments import segment_io_mb
from tests.runtime.kreduce_helpers import CLASSES, INPUT_SHAPE, make_plan, make_workers


def _problem(dtype: str) -> Problem:
    return Problem(workload=load_workload("resnet50-cifar10"), platform=load_platform("s3"),
                   prices=load_prices(), epochs=19, deadline_s=8000, max_global_batch=1024,
                   exchange_dtype=dtype)


def test_shards_travel_at_half_size_and_merged_shards_do_not() -> None:
    bf16, platform = _problem("bfloat16"), load_platform("s3")
    model = bf16.workload.model_mb
    w, memory, k = np.array([4]), np.array([2048]), np.array([2])
    shard, half = model / 2, model / 4
    upload, aggregate, download = communication_times(bf16, w, memory, k)
    tp = platform.throughput
    assert float(upload[0]) == pytest.approx((model - shard) / 2 / tp("up", 2048, half))
    assert float(aggregate[0]) == pytest.approx(3 * half / tp("down", 2048, half)
                                                + shard / tp("up", 2048, shard))
    assert float(download[0]) == pytest.approx((model - shard) / tp("down", 2048, shard))
    up_n, down_n = non_aggregator_times(bf16, memory, k)
    assert float(up_n[0]) == pytest.approx(model / 2 / tp("up", 2048, half))
    assert float(down_n[0]) == pytest.approx(model / tp("down", 2048, shard))


def test_valkey_traffic_counts_the_half_size_shards() -> None:
    assert float(exchange_bytes_per_iteration_mb(10.0, 4)) == 10.0 * (3 * 4 - 2)
    assert float(exchange_bytes_per_iteration_mb(10.0, 4, 0.5)) == 10.0 * (3 * 2 + 1)
    assert float(exchange_bytes_per_iteration_mb(10.0, 1, 0.5)) == 0.0


def test_memory_counts_the_reference_residual_and_previous_shard() -> None:
    model, k = 100.0, 4
    plain = exchange_memory_mb(model, 4096, 8, k, "s3")
    coded = exchange_memory_mb(model, 4096, 8, k, "s3", exchange_dtype="bfloat16")
    shard = model / k
    assert float(coded[0] - plain[0]) == pytest.approx(2 * model + shard / 2 + shard)
    assert float(coded[1] - plain[1]) == pytest.approx(2 * model + shard / 2)


def test_bfloat16_is_faster_on_an_upload_bound_plan_and_dearer_in_checkpoints() -> None:
    plain, coded = _problem("float32"), _problem("bfloat16")
    args = ([6], [3008], [2], [64], [128])
    a, b = evaluate(plain, *args), evaluate(coded, *args)
    assert float(b.iteration_s[0]) < float(a.iteration_s[0])
    assert float(b.checkpoint_s[0]) > float(a.checkpoint_s[0])  # R and e are checkpointed


@pytest.mark.parametrize("aggregators", [1, 2, 4])
def test_segment_io_counts_the_codec_state_an_aggregator_checkpoints(aggregators: int) -> None:
    plan = make_plan(5, aggregators, 3, 5, "hap", exchange_dtype="bfloat16")
    worker = make_workers(plan, build_model("mlp", CLASSES, INPUT_SHAPE), MemoryChannel())[0]
    # worker 0 is an aggregator: it checkpoints R, e and its previous merged shard
    checkpointed = sum(v.nbytes for v in worker.exchange_state.values())
    model_bytes = worker.parameters.nbytes
    plain, coded = _problem("float32"), _problem("bfloat16")
    model = plain.workload.model_mb
    for f32, bf16 in zip(segment_io_mb(plain, aggregators), segment_io_mb(coded, aggregators),
                         strict=True):
        assert float(bf16 - f32) / model == pytest.approx(checkpointed / model_bytes, rel=1e-3)


def test_plan_writes_the_exchange_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--workload", "bert-base-cola", "--deadline", "3000", "--max-global-batch",
            "1024", "--epochs", "3", "--min-workers", "2", "--pattern", "kreduce"]
    assert main([*argv, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*argv, "--exchange-dtype", "bfloat16", "--json"]) == 0
    coded = json.loads(capsys.readouterr().out)
    assert plain["plan"]["training"]["exchange_dtype"] == "float32"
    assert coded["plan"]["training"]["exchange_dtype"] == "bfloat16"
    Plan.from_dict(coded["plan"])  # the runtime's contract accepts it
    # the run is cheaper; the codec's state makes checkpoints larger (storage_usd)
    def running(document: dict[str, Any]) -> float:
        prediction = document["plan"]["prediction"]
        return float(prediction["cost_usd"] - prediction["breakdown"]["storage_usd"])

    assert running(coded) < running(plain)
    assert main([*argv, "--exchange-dtype", "bfloat16"]) == 0
    assert "uploads bfloat16" in capsys.readouterr().out
    assert main([*argv, "--exchange-dtype", "float16", "--json"]) == 2
    refused = json.loads(capsys.readouterr().out)
    assert refused["argument"] == "--exchange-dtype" and "bfloat16" in refused["message"]
    with pytest.raises(ValueError, match="exchange_dtype"):
        dataclasses.replace(_problem("float32"), exchange_dtype="int8")
    assert _problem("float32").upload_share == 1.0 and _problem("bfloat16").upload_share == 0.5
