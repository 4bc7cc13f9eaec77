"""Keeping things is priced: checkpoints and results on S3 Standard for the retention the stack
enforces, the cache's ECPU/s minimum (metered whether used or not); the lines are in the plan's
breakdown and its printed cost line."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fasdl.contract.cache import MAX_ECPU_PER_SECOND
from planner.commands.report import describe_choice
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import load_platform, load_prices, load_workload
from planner.model.terms.cost_model import evaluate
from planner.model.terms.storage_cost import storage_cost
from planner.search.searches import SearchResult, choice_from

DAY_S, MONTH_S = 86_400.0, 730 * 3600.0
W, M, K, BATCH, EPOCHS = 8, 3008, 2, 32, 3


def _evaluated(channel: str) -> tuple[Problem, dict[str, float]]:
    # no per-slot ceiling: at W = 8, K = 2 resnet50's merged shards would stretch the run to 13
    # segments (test_hot_key.py); these check the storage arithmetic on five
    platform = dataclasses.replace(load_platform(channel),
                                   cache_slot_ecpu_per_s=float(MAX_ECPU_PER_SECOND))
    problem = Problem(workload=load_workload("resnet50-cifar10"), platform=platform,
                      prices=load_prices("us-east-1"), epochs=EPOCHS, deadline_s=1e6,
                      max_global_batch=1024)
    return problem, evaluate(problem, W, M, K, BATCH, BATCH, bsp=False).row(0)


@pytest.mark.parametrize("channel", ["s3", "valkey"])
def test_checkpoint_and_result_storage_by_hand(channel: str) -> None:
    """resnet50 (97.49 MB, SGD: one momentum vector a worker), W = 8, K = 2, HAP: a checkpoint
    is the merged model, 8 momentum vectors and 6 non-aggregators' parameters, 15 models. Five
    segments: two kept (during the run and a month after, with the model and its export), three
    pruned (billed a noncurrent day and the wait for midnight), at $0.023 per GB-month."""
    _, row = _evaluated(channel)
    assert row["segments"] == 5 and row["violation"] == 0
    checkpoint_gb = 97.49 * 15 / 1024
    gb_s = (2 * checkpoint_gb * row["time_s"] + 3 * checkpoint_gb * 2 * DAY_S
            + (2 * checkpoint_gb + 2 * 97.49 / 1024) * 30 * DAY_S)
    assert row["cost_storage_usd"] == pytest.approx(0.023 * gb_s / MONTH_S, rel=1e-12)
    assert 0.07 < row["cost_storage_usd"] < 0.08


def test_the_cache_minimum_is_billed_while_the_exchange_is_idle() -> None:
    """The minimum is the mean ECPU/s rounded up; the exchange runs at its peak for
    consumed/peak seconds (billed in the exchange line), every other second pays the minimum."""
    _, row = _evaluated("valkey")
    iterations = EPOCHS * 50_000 / (W * BATCH)
    consumed = row["cache_ecpu_per_s_mean"] * row["iteration_s"] * iterations
    idle_s = row["time_s"] - consumed / row["cache_ecpu_per_s_peak"]
    minimum = math.ceil(row["cache_ecpu_per_s_mean"])
    assert 1_000 < minimum < row["cache_ecpu_per_s_peak"]
    assert row["cost_cache_minimum_usd"] == pytest.approx(minimum * idle_s * 2.3e-9, rel=1e-9)
    assert 0 < idle_s < row["time_s"]


@pytest.mark.parametrize("channel", ["s3", "valkey"])
def test_the_cost_is_the_sum_of_its_lines(channel: str) -> None:
    _, row = _evaluated(channel)
    lines = ("cost_lambda_usd", "cost_requests_usd", "cost_exchange_usd", "cost_checkpoint_usd",
             "cost_storage_usd", "cost_cache_minimum_usd")
    assert row["cost_usd"] == pytest.approx(sum(row[line] for line in lines), rel=1e-12)
    assert (row["cost_cache_minimum_usd"] > 0) == (channel == "valkey")


def test_a_single_worker_cache_pays_the_api_minimum_all_run() -> None:
    """W = 1 exchanges nothing; the stack still sets the 1,000 ECPU/s the API requires."""
    problem, _ = _evaluated("valkey")
    row = evaluate(problem, 1, M, 1, BATCH, BATCH).row(0)
    assert row["cost_cache_minimum_usd"] == pytest.approx(1_000 * row["time_s"] * 2.3e-9)


def test_more_kept_checkpoints_cost_more() -> None:
    problem, row = _evaluated("s3")
    args = (problem, np.array([W]), np.array([K]), np.array([False]),
            np.array([row["segments"]]), np.array([row["time_s"]]))
    costs = [float(storage_cost(*args, keep=keep)[0]) for keep in (1, 2, 5)]
    assert costs[0] < costs[1] < costs[2]
    assert costs[1] == pytest.approx(row["cost_storage_usd"])  # the runtime's default, 2


@pytest.mark.parametrize("channel", ["s3", "valkey"])
def test_the_breakdown_and_the_printed_plan_show_the_lines(channel: str) -> None:
    problem, _ = _evaluated(channel)
    ev = evaluate(problem, W, M, K, BATCH, BATCH, bsp=False)
    choice = choice_from(ev, 0)
    assert choice.breakdown["storage_usd"] == pytest.approx(float(ev.cost_storage_usd[0]))
    assert choice.breakdown["cache_minimum_usd"] == pytest.approx(
        float(ev.cost_cache_minimum_usd[0]))
    text = describe_choice(problem, SearchResult("exact", "kreduce", choice, None, 1, 0.0))
    assert f"storage ${choice.breakdown['storage_usd']:.4f}" in text
    assert ("cache minimum $" in text) == (channel == "valkey")
