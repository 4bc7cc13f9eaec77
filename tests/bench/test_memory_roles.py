"""Measured peak memory of each worker role <= M, modelled memory <= M (issue 12).

One training step and one exchange step per worker of the planner's plan, each worker in a
fresh interpreter, through a real S3-compatible server (bench/memory_roles.py).

SqueezeNet runs at the planner's batches. ResNet-50 and MobileNet run at the plan's W, M, K
and cap but batch 2: the registry's networks keep CIFAR-sized feature maps (no early
down-sampling), ~31 and ~12 MB per sample measured, against the workloads' k = 5.0 and 7.2
chosen for the paper's networks, so their planned batches (512, 256) need ~16 GB and ~3.5 GB
and minutes of CPU here. Their buffers and c are what these runs check.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench import memory_roles
from fasdl.inflight import default_inflight_mb
from local.servers import SeaweedS3Server
from planner.memory import role_memory_mb
from planner.profiles import load_workload

MEASURED_BATCH: dict[str, int | None] = {
    "squeezenet-cifar10": None,  # the plan's own
    "resnet50-cifar10": 2,
    "mobilenet-cifar10": 2,
}


@pytest.fixture(scope="module")
def plans() -> dict[str, Any]:
    return {name: memory_roles.planned(name) for name in MEASURED_BATCH}


@pytest.fixture(scope="module")
def rows(plans: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    with SeaweedS3Server() as server:
        yield memory_roles.measure([memory_roles.with_batches(plans[name], batch)
                                    for name, batch in MEASURED_BATCH.items()], server)


@pytest.mark.slow
@pytest.mark.parametrize("workload", sorted(MEASURED_BATCH))
def test_each_role_peaks_below_its_memory_size(workload: str, plans: dict[str, Any],
                                                    rows: list[dict[str, Any]]) -> None:
    plan = plans[workload]
    d, t = plan.deployment, plan.training
    planned_a, planned_n = role_memory_mb(load_workload(workload), d.memory_mb, d.workers,
                                          t.aggregators, t.batch_aggregator,
                                          t.batch_non_aggregator, d.channel)
    assert max(float(planned_a), float(planned_n)) <= d.memory_mb  # the plan fits its M
    measured = [row for row in rows if row["workload"] == workload]
    assert {row["role"] for row in measured} == {"aggregator", "non-aggregator"}
    cap_mb = float(default_inflight_mb(d.memory_mb, plan.workload.model_mb))
    for row in measured:
        label = f"{workload} {row['role']} at B={row['batch']}: {row}"
        # Lambda kills at M: the measured peak must stay under it. Against the modelled
        # figure the margin is thin (381.0 vs 381.1 MB here) and a fresh machine's first run
        # peaked at 552 MB while importing (mobilenet, modelled 416): the planner's c does not
        # cover that spike yet, so the comparison is reported by bench.memory_roles, not
        # asserted (issue 12 stays open on it).
        assert row["peak_rss_mb"] <= d.memory_mb, label
        assert row["modelled_mb"] <= d.memory_mb, label
        assert row["frames_peak_mb"] <= max(cap_mb, row["frame_mb"]) + 1e-6, label
        if MEASURED_BATCH[workload] is None:  # the planner's own batch was measured
            role_planned = planned_a if row["role"] == "aggregator" else planned_n
            assert row["modelled_mb"] == pytest.approx(float(role_planned)), label
