"""ElastiCache's per-hash-slot ceiling in the model (planner/model/terms/cache_throughput.py):
the busiest key, a merged shard every other worker reads, floors the download phase at
(W−1)·e(S_s/C)/R_slot; S3 has no such floor; a W = 64 plan charges it and says so."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from fasdl.contract.cache import MAX_ECPU_PER_SECOND
from planner.model.inputs.problem import Problem
from planner.model.inputs.profile_fields import ProfileError
from planner.model.inputs.profiles import PlatformProfile, load_platform
from planner.model.terms.cache_throughput import slot_floors
from planner.model.terms.channels import S3Costs, ValkeyCosts
from planner.model.terms.cost_model import evaluate
from planner.model.terms.exchange_time import SlotFloors, non_aggregator_times
from planner.model.terms.request_ceiling import exchange_platform
from tests.planner.cli_helpers import cli, run
from tests.planner.search_helpers import paper_problem

W, M, BATCH = 64, 2048, 64


def _uncapped(problem: Problem) -> Problem:
    return dataclasses.replace(problem, platform=dataclasses.replace(
        problem.platform, cache_slot_ecpu_per_s=float(MAX_ECPU_PER_SECOND)))


def test_the_floor_is_every_other_workers_read_of_one_merged_shard_at_the_slots_rate() -> None:
    problem = paper_problem("resnet50-cifar10", 1e6, 4096, 1, "valkey")
    k = np.array([1, 4, 64])
    merged_kb = problem.workload.model_mb / k * 1024
    floors = slot_floors(problem, W, k)
    np.testing.assert_allclose(floors.download, 63 * merged_kb / 30_000.0)
    np.testing.assert_allclose(floors.publish, merged_kb / 30_000.0)  # the one write
    assert float(slot_floors(problem, 1, 1).download) == 0.0
    assert S3Costs().slot_floors(problem, np.array([W]), np.array([1])) == SlotFloors()
    np.testing.assert_allclose(
        ValkeyCosts().slot_floors(problem, np.array([W]), k).download, floors.download)


@pytest.mark.parametrize("aggregators", [2, 8])
def test_a_hot_key_stretches_the_download_phase_to_its_floor(aggregators: int) -> None:
    """Phased HAP: each role's download takes at least the floor, the publish at least one
    write's, and every transfer at least its bytes at the slot's rate (request_ceiling.py),
    so the iteration grows."""
    problem = paper_problem("resnet50-cifar10", 1e6, 4096, 1, "valkey")
    capped = evaluate(problem, W, M, aggregators, BATCH, BATCH)
    free = evaluate(_uncapped(problem), W, M, aggregators, BATCH, BATCH)
    floors = slot_floors(problem, W, aggregators)
    floor, publish_floor = float(floors.download), float(floors.publish)
    _, download_n = non_aggregator_times(problem, M, aggregators)
    assert floor > float(download_n) and floor > float(free.download_s[0])  # it binds here
    assert float(capped.download_s[0]) >= floor * (1 - 1e-9)
    assert float(capped.aggregate_s[0]) >= float(free.aggregate_s[0])
    assert float(capped.aggregate_s[0]) >= publish_floor
    assert float(capped.iteration_s[0]) > float(free.iteration_s[0])
    assert float(capped.time_s[0]) > float(free.time_s[0])


def test_s3_has_no_slot_floor() -> None:
    problem = paper_problem("resnet50-cifar10", 1e6, 4096, 1, "s3")
    capped = evaluate(problem, W, M, 2, BATCH, BATCH)
    free = evaluate(_uncapped(problem), W, M, 2, BATCH, BATCH)
    assert float(capped.iteration_s[0]) == float(free.iteration_s[0])


W64 = ("plan", "--workload", "resnet50-cifar10", "--channel", "valkey", "--deadline", "20000",
       "--max-global-batch", "4096", "--epochs", "2", "--min-workers", "64",
       "--max-concurrency", "128", "--cache-warm")


def test_a_w64_valkey_plan_keeps_its_keys_under_the_slot_ceiling(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 45's done-when: at W = 64 the plan keeps every key within 30,000 ECPU/s (here by
    small chunks of many shards) or charges it, visible in --explain; without the ceiling the
    planner's choice puts a key well above it. The plan carries the ceiling for the relay."""
    code, document, _ = run(capsys, *W64)
    assert code == 0, document
    plan = document["plan"]
    breakdown = plan["prediction"]["breakdown"]
    assert plan["deployment"]["workers"] == W
    assert breakdown["cache_slot_ecpu_per_s"] == 30_000.0
    code, explained, _ = cli(*W64, "--explain")
    assert code == 0
    hot = "hot key: each merged shard is one key" in explained
    assert hot == (breakdown["cache_ecpu_per_s_per_key"] > 30_000.0)
    if hot:
        assert "the download phase is charged at the slot's rate" in explained
    platform = load_platform("valkey").to_dict()
    platform["cache_slot_ecpu_per_s"] = float(MAX_ECPU_PER_SECOND)
    (tmp_path / "uncapped.json").write_text(json.dumps(platform))
    code, document, _ = run(capsys, *W64, "--platform", str(tmp_path / "uncapped.json"))
    assert code == 0, document
    assert document["plan"]["prediction"]["breakdown"]["cache_ecpu_per_s_per_key"] > 60_000.0


def test_one_valkey_request_moves_at_most_its_slots_rate() -> None:
    """request_ceiling.py: on Valkey a request of S MB takes at least S·1024/R_slot seconds
    (1 ECPU per KB); S3 keeps the fit; loads and checkpoints (S3) are not capped."""
    problem = paper_problem("resnet50-cifar10", 1e6, 4096, 1, "valkey")
    platform = exchange_platform(problem)
    assert platform.request_mb_per_s_max == pytest.approx(30_000.0 / 1024)
    sizes = np.array([0.001, 1.0, 48.0])
    np.testing.assert_array_less(sizes * 1024 / 30_000.0 - 1e-12,
                                 platform.transfer_time("down", 3008, sizes))
    np.testing.assert_allclose(platform.throughput("up", 3008, 48.0), 30_000.0 / 1024)
    s3 = paper_problem("resnet50-cifar10", 1e6, 4096, 1, "s3")
    assert exchange_platform(s3) is s3.platform
    with pytest.raises(ProfileError, match="request_mb_per_s_max"):
        PlatformProfile.from_dict({**problem.platform.to_dict(), "request_mb_per_s_max": 5.0})

