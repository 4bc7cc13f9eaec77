"""bench/adaptive_window.py: whether the transfer case can be set, on the shipped AWS profile
(squeezenet's bytes at a compute where more workers pay)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.adaptive_setup import LEAST_SLACK, MISS
from bench.adaptive_window import transfer_case, with_model_mb
from tests.bench.test_adaptive_bench import SETTING, compute_bound

ROOMY = replace(SETTING, ceiling=8, max_global_batch=256)


def test_with_room_to_scale_out_the_transfer_case_can_be_set() -> None:
    row = transfer_case(ROOMY, compute_bound(10.0))
    assert row["binds"] and row["missed"] >= 1 + MISS
    assert row["reachable"] * LEAST_SLACK <= 1.0 and row["settable"]
    assert row["missed"] == pytest.approx(row["planned"]["true_time_s"] / row["deadline_s"],
                                          abs=1e-3)


def test_where_the_planned_configuration_keeps_the_deadline_it_cannot() -> None:
    """Less compute: 2x slower transfers cost the plan's configuration less than the 10 % it
    aims below the deadline, so the static run would keep it."""
    row = transfer_case(ROOMY, compute_bound(3.0))
    assert row["binds"] and row["missed"] < 1 + MISS and not row["settable"]


def test_bytes_only_scale_the_exchange() -> None:
    base = compute_bound(3.0)
    grown = with_model_mb(base, 64.0)
    assert grown.workload.model_mb == 64.0
    assert (grown.workload.a, grown.platform) == (base.workload.a, base.platform)
