"""Checks against the FasDL paper (Table II, Table IV, Fig. 3) with the shipped profiles.

The paper leaves E, D, prices and its bandwidth fits unpublished, so absolute USD cannot be
reproduced (digest §7.2). E is set per workload so that the paper's own K-Opt configuration
fills its deadline under our model; what our model then says is asserted, paper or not.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.model.inputs.problem import Problem, Violation
from planner.model.inputs.profiles import load_platform, load_prices, load_workload
from planner.model.inputs.recipe import Recipe
from planner.model.terms.cost_model import evaluate
from planner.model.terms.exchange_time import communication_times
from planner.search.searches import exact

# Table IV: deadline, B^g_max, and the paper's K-REDUCE choice (W, M, B^a, K, B^n).
TABLE_IV = {
    "bert-base-cola": (2500, 640, (10, 10240, 32, 4, 84)),
    "resnet50-cifar10": (8000, 1024, (7, 1536, 128, 4, 170)),
    "mobilenet-cifar10": (4000, 512, (3, 1920, 128, 1, 192)),
    "squeezenet-cifar10": (3000, 384, (2, 768, 128, 1, 201)),
}


def table_iv_problem(name: str, channel: str = "s3") -> tuple[Problem, tuple[int, ...]]:
    deadline, cap, config = TABLE_IV[name]
    w, m, ba, k, bn = config
    # the paper's memory model: c holds one optimizer vector (weights, gradients, momentum),
    # so the shipped AdamW recipe of bert-base-cola (+ S_m) is not the paper's
    workload = dataclasses.replace(load_workload(name), recipe=Recipe())
    problem = Problem(workload=workload, platform=load_platform(channel),
                      prices=load_prices(), epochs=1, deadline_s=deadline, max_global_batch=cap)
    per_epoch = float(evaluate(problem, w, m, k, ba, bn).time_s[0])
    epochs = int(deadline // per_epoch)
    return dataclasses.replace(problem, epochs=epochs, min_workers=2), config


@pytest.mark.parametrize(("name", "memory", "batch", "seconds"), [
    ("bert-base-cola", 10240, 32, 7.0788), ("bert-base-cola", 10240, 84, 17.7886),
    ("resnet50-cifar10", 1536, 128, 3.6675), ("resnet50-cifar10", 1536, 170, 4.7639),
    ("resnet50-cifar10", 1664, 128, 3.3651), ("mobilenet-cifar10", 1920, 128, 1.0165),
    ("mobilenet-cifar10", 1920, 192, 1.4893), ("mobilenet-cifar10", 2048, 128, 0.9499),
    ("squeezenet-cifar10", 768, 128, 0.4821), ("squeezenet-cifar10", 768, 201, 0.7158),
    ("squeezenet-cifar10", 1792, 128, 0.1915), ("squeezenet-cifar10", 640, 128, 0.5949),
])
def test_training_time_from_table_ii(name: str, memory: int, batch: int, seconds: float) -> None:
    assert float(load_workload(name).train_time(batch, memory)) == pytest.approx(seconds,
                                                                                abs=6e-5)


def comm_by_k(name: str, memory: int, workers: int = 10) -> np.ndarray:
    problem, _ = table_iv_problem(name)
    ks = np.arange(1, workers + 1)
    up, aggregate, down = communication_times(problem, np.full(workers, workers),
                                              np.full(workers, memory), ks)
    return np.asarray(up + aggregate + down)


@pytest.mark.parametrize("memory", [1024, 1536, 2048, 3008])
def test_resnet50_communication_falls_then_flattens_in_k(memory: int) -> None:
    """Fig. 3 (W = 10): steep fall from K = 1, optimum at a large K. The paper's minimum is at
    K = 7 with a slight rise after it; with the fitted S3 profile our curve is flat past K ~ 8
    (minimum at K = 9 or 10, within 2 %), because the fit keeps 10-MB shards near peak
    bandwidth. With more workers the U is clear: see the next test."""
    comm = comm_by_k("resnet50-cifar10", memory)
    best = int(np.argmin(comm)) + 1
    assert best >= 7
    assert comm[0] > 2.5 * comm[best - 1]
    assert comm[-1] <= 1.02 * comm[best - 1]


@pytest.mark.parametrize("memory", [1024, 1536, 2048, 3008])
@pytest.mark.parametrize("workers", [16, 20])
def test_resnet50_communication_is_u_shaped_with_more_workers(memory: int, workers: int) -> None:
    comm = comm_by_k("resnet50-cifar10", memory, workers)
    best = int(np.argmin(comm)) + 1
    assert 1 < best < workers
    assert comm[-1] > comm[best - 1] * 1.005
    assert comm[0] > 3 * comm[best - 1]


@pytest.mark.parametrize("memory", [1024, 1536, 2048, 3008])
def test_squeezenet_communication_rises_with_k(memory: int) -> None:
    """Fig. 3: a small model is best with one or two aggregators, then communication rises."""
    comm = comm_by_k("squeezenet-cifar10", memory)
    best = int(np.argmin(comm)) + 1
    assert best <= 2
    assert np.all(np.diff(comm[best - 1:]) > 0)
    assert comm[-1] > 1.5 * comm[best - 1]


@pytest.mark.parametrize("name", sorted(TABLE_IV))
def test_the_papers_choices_are_executable_under_our_model(name: str) -> None:
    problem, (w, m, ba, k, bn) = table_iv_problem(name)
    assert problem.epochs >= 1
    ev = evaluate(problem, w, m, k, ba, bn)
    assert ev.violation[0] == Violation.NONE  # memory (k, c defaults), cap and timeout hold


@pytest.mark.parametrize("name", sorted(TABLE_IV))
@pytest.mark.parametrize("channel", ["s3", "valkey"])
@pytest.mark.parametrize("rule", ["align", "search"])
def test_k_reduce_is_no_costlier_than_the_baselines(name: str, channel: str, rule: str) -> None:
    """Lemma 3.2 under one cost model, with the paper's K-Opt as a reference point: under the
    paper's alignment rule, and with B^n searched (its grid holds the rule's B^n). Where
    K-REDUCE finds nothing in time (BERT-base and ResNet-50 on Valkey at Table IV's deadlines:
    their shards meet ElastiCache's per-slot ceiling, planner/model/terms/request_ceiling.py),
    neither does any baseline."""
    problem, (w, m, ba, k, bn) = table_iv_problem(name)
    problem = dataclasses.replace(problem, platform=load_platform(channel))
    kreduce = exact(problem, "kreduce", bn_rule=rule)
    baselines = [exact(problem, baseline) for baseline in ("scatterreduce", "allreduce")]
    if kreduce.choice is None:
        # the largest models' shards at one slot's rate (~29 MB/s a request)
        assert channel == "valkey" and name in {"bert-base-cola", "resnet50-cifar10"}, (
            kreduce.reason)
        assert kreduce.violation == Violation.DEADLINE
        assert all(b.choice is None for b in baselines)
        return
    for other in baselines:
        if other.choice is not None:
            assert kreduce.choice.cost_usd <= other.choice.cost_usd * (1 + 1e-12)
    papers = evaluate(problem, w, m, k, ba, bn)
    if papers.violation[0] == Violation.NONE:
        assert kreduce.choice.cost_usd <= float(papers.cost_usd[0]) * (1 + 1e-12)


def test_allreduce_cannot_fit_bert_in_time() -> None:
    """Table IV: AllReduce has no fit for BERT; with the fitted S3 profile our model agrees.
    (For ResNet50 the paper also says no fit; our model finds W = 2 fits: see docs/results.md.)"""
    problem, _ = table_iv_problem("bert-base-cola")
    result = exact(problem, "allreduce")
    assert result.choice is None and result.violation == Violation.DEADLINE
    assert exact(problem, "kreduce", bn_rule="align").choice is not None
