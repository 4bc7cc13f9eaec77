"""The plan contract: validation names the field and range; JSON round trip; partitions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fasdl.contract.plan import Plan, PlanError
from fasdl.contract.training import global_batch, partition_sizes
from tests.planner.resnet_plan import make_plan


def test_round_trip_preserves_every_field(tmp_path: Any) -> None:
    plan = make_plan()
    assert Plan.from_json(plan.to_json()) == plan
    path = tmp_path / "plan.json"
    plan.save(path)
    assert Plan.load(path) == plan
    assert json.loads(path.read_text())["version"] == 1


def test_derived_quantities() -> None:
    plan = make_plan()
    assert plan.global_batch == 4 * 128 + 3 * 170 == 1022
    assert plan.iterations_per_epoch == 50_000 // 1022
    assert plan.total_iterations == 48 * 10
    assert plan.segments == 16
    assert plan.pattern == "kreduce"
    assert [plan.batch_of(w) for w in range(7)] == [128] * 4 + [170] * 3
    assert sum(plan.partition_sizes()) == 50_000


@pytest.mark.parametrize(("section", "changes", "field", "fragment"), [
    ("training", {"aggregators": 8}, "training.aggregators", "[1, 7]"),
    ("training", {"aggregators": 0}, "training.aggregators", "[1, 7]"),
    ("training", {"batch_aggregator": 0}, "training.batch_aggregator", "[1, 1000000]"),
    ("training", {"batch_non_aggregator": 100}, "training.batch_non_aggregator", ">= batch"),
    ("training", {"batch_non_aggregator": 400}, "training.max_global_batch", "[1, 1024]"),
    ("training", {"epochs": -1}, "training.epochs", "[1, 100000]"),
    ("training", {"epochs": 0}, "training.epochs", "[1, 100000]"),
    ("training", {"sync": "async"}, "training.sync", "hap, bsp"),
    ("training", {"segment_iterations": 0}, "training.segment_iterations", "[1, 1000000000]"),
    ("training", {"momentum": 1.0}, "training.momentum", "[0.0, 1.0)"),
    ("training", {"learning_rate": 0.0}, "training.learning_rate", "(0.0, 10.0]"),
    ("deployment", {"memory_mb": 127}, "deployment.memory_mb", "[128, 10240]"),
    ("deployment", {"memory_mb": 10241}, "deployment.memory_mb", "[128, 10240]"),
    ("deployment", {"channel": "dynamodb"}, "deployment.channel", "s3, valkey"),
    ("deployment", {"arch": "riscv"}, "deployment.arch", "x86_64, arm64"),
    ("deployment", {"timeout_s": 901}, "deployment.timeout_s", "[60, 900]"),
    ("deployment", {"region": "mars"}, "deployment.region", "us-east-1"),
    ("workload", {"samples": 100}, "workload.samples", "global batch"),
    ("workload", {"model": ""}, "workload.model", "registry name"),
    ("workload", {"model_mb": -1.0}, "workload.model_mb", "(0.0"),
])
def test_every_invalid_field_is_named(section: str, changes: dict[str, Any], field: str,
                                      fragment: str) -> None:
    data = make_plan().to_dict()
    data[section].update(changes)
    with pytest.raises(PlanError) as raised:
        Plan.from_dict(data)
    assert raised.value.field == field
    assert field in str(raised.value)
    assert fragment in str(raised.value)


def test_scatterreduce_plans_need_equal_batches() -> None:
    data = make_plan().to_dict()
    data["deployment"]["workers"] = 4
    with pytest.raises(PlanError, match="must equal batch_aggregator"):
        Plan.from_dict(data)


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d.pop("workload"), "workload"),
    (lambda d: d["training"].pop("epochs"), "training.epochs"),
    (lambda d: d["training"].update(bogus=1), "training.bogus"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.pop("version"), "version"),
    (lambda d: d.update(extra={}), "extra"),
    (lambda d: d.update(deployment=[]), "deployment"),
    (lambda d: d["training"].update(epochs="ten"), "training.epochs"),
    (lambda d: d["training"].update(epochs=True), "training.epochs"),
])
def test_malformed_documents_are_rejected(mutate: Any, field: str) -> None:
    data = make_plan().to_dict()
    mutate(data)
    with pytest.raises(PlanError) as raised:
        Plan.from_dict(data)
    assert raised.value.field == field


def test_corrupt_json_and_missing_file(tmp_path: Any) -> None:
    with pytest.raises(PlanError, match="not valid JSON"):
        Plan.from_json("{not json")
    with pytest.raises(PlanError, match="cannot read plan file"):
        Plan.load(tmp_path / "missing.json")


@given(samples=st.integers(1, 10**6), workers=st.integers(1, 64), data=st.data())
def test_partitions_sum_to_the_dataset_and_feed_every_iteration(samples: int, workers: int,
                                                                data: st.DataObject) -> None:
    aggregators = data.draw(st.integers(1, workers))
    batch_a = data.draw(st.integers(1, 512))
    batch_n = batch_a if aggregators == workers else data.draw(st.integers(batch_a, 1024))
    sizes = partition_sizes(samples, workers, aggregators, batch_a, batch_n)
    batch = global_batch(workers, aggregators, batch_a, batch_n)
    assert len(sizes) == workers
    assert sum(sizes) == samples
    iterations = samples // batch
    for worker, size in enumerate(sizes):
        own = batch_a if worker < aggregators else batch_n
        assert size >= iterations * own  # every worker can run the epoch's iterations
        assert abs(size - samples * own / batch) < 1 + batch / max(1, workers - aggregators)
