"""Randomized planning problems for property tests (adaptdl style): every model parameter is
drawn, so the properties are checked far beyond the shipped profiles."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from fasdl.contract.cache import MAX_ECPU_PER_SECOND
from fasdl.contract.workload import Workload
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import PlatformProfile, Prices, WorkloadProfile, load_prices

PROFILED_MEMORIES = (128.0, 512.0, 1024.0, 2048.0, 3008.0)


@st.composite
def workloads(draw: Any, train_cpu: bool = False) -> WorkloadProfile:
    """A workload; with ``train_cpu`` maybe a training iteration's CPU too (else not profiled):
    up to 0.5 s per step and 10 ms per sample, so it sets the iteration at small M."""
    model_mb = draw(st.floats(0.5, 500.0))
    cpu = (draw(st.one_of(st.just((0.0, 0.0)), st.tuples(st.floats(0.0, 0.5),
                                                          st.floats(0.0, 0.01))))
           if train_cpu else (0.0, 0.0))
    return WorkloadProfile(
        workload=Workload(name="synthetic", model="mlp", dataset="datasets/synthetic",
                          samples=draw(st.integers(2_000, 100_000)),
                          dataset_mb=draw(st.floats(1.0, 500.0)), model_mb=model_mb),
        a=draw(st.floats(0.5, 3000.0)), b=draw(st.floats(0.0, 40.0)),
        m=draw(st.floats(-120.0, 1200.0)), k=draw(st.floats(0.5, 20.0)),
        c=300.0 + 3.0 * model_mb, cpu_step_s=cpu[0], cpu_sample_s=cpu[1])


@st.composite
def platforms(draw: Any, channel: str = "s3", client_cpu: bool = False) -> PlatformProfile:
    """Bandwidth that does not fall as memory grows, as on Lambda; with ``client_cpu`` the
    exchange's CPU per request and MB is drawn too (else 0: not profiled)."""
    def rising(low: float, high: float) -> tuple[float, ...]:
        values = draw(st.lists(st.floats(low, high), min_size=len(PROFILED_MEMORIES),
                               max_size=len(PROFILED_MEMORIES)))
        return tuple(sorted(values))
    return PlatformProfile(
        name="synthetic", channel=channel, arch="x86_64", source="hypothesis",
        memory_mb=PROFILED_MEMORIES, up_peak=rising(5.0, 150.0), up_rate=rising(0.01, 2.0),
        down_peak=rising(5.0, 150.0), down_rate=rising(0.01, 2.0),
        invocation_overhead_s=draw(st.floats(0.0, 5.0)),
        torch_load_cpu_s=draw(st.floats(0.0, 30.0)),
        # no per-slot ceiling: the formulas these check are the paper's (test_hot_key.py
        # checks the floor it adds)
        cache_slot_ecpu_per_s=float(MAX_ECPU_PER_SECOND),
        **(draw(cpu_coefficients()) if client_cpu else {}))


def cpu_coefficients() -> st.SearchStrategy[dict[str, float]]:
    """κ per request (up to 20 ms) and per MB (up to 20 ms/MB), or none profiled."""
    per = st.floats(0.0, 0.02)
    drawn = st.fixed_dictionaries({
        "cpu_up_request_s": per, "cpu_up_mb_s": per, "cpu_down_request_s": per,
        "cpu_down_mb_s": per, "cpu_fold_mb_s": st.floats(0.0, 0.01),
        "cpu_bf16_frame_mb_s": st.floats(0.0, 0.02), "cpu_bf16_fold_mb_s": st.floats(0.0, 0.02)})
    return st.one_of(st.just({}), drawn)


@st.composite
def problems(draw: Any, channel: str | None = None, small: bool = False,
             client_cpu: bool = False) -> Problem:
    """A problem; ``small`` keeps the grid small enough for the exhaustive reference;
    ``client_cpu`` may give the platform the exchange's CPU and the workload a training step's
    (planner/model/terms/client_cpu.py)."""
    chosen = channel or draw(st.sampled_from(["s3", "valkey"]))
    cap = draw(st.integers(16, 160 if small else 1024))
    fields: dict[str, Any] = {}
    if small:
        top = draw(st.sampled_from([1024, 1536, 2048]))
        fields = {"memory_min_mb": 128, "memory_max_mb": top, "max_workers": 8}
    return Problem(
        workload=draw(workloads(client_cpu)), platform=draw(platforms(chosen, client_cpu)),
        prices=load_prices(),
        epochs=draw(st.integers(1, 40)), deadline_s=draw(st.floats(60.0, 50_000.0)),
        max_global_batch=cap, timeout_s=900.0, timeout_margin_s=60.0,
        own_shard_local=draw(st.booleans()), **fields)


def with_duplex(platform: PlatformProfile, duplex: float) -> PlatformProfile:
    """``platform`` with the same duplex d at every profiled memory."""
    return dataclasses.replace(platform, duplex=(duplex,) * len(platform.memory_mb))


def without_storage_price(problem: Problem) -> Problem:
    return dataclasses.replace(problem, prices=dataclasses.replace(problem.prices,
                                                                   valkey_gb_hour=0.0))


__all__ = ["Prices", "problems", "with_duplex", "without_storage_price"]
