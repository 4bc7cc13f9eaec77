"""The pipelined K-REDUCE pattern: its time model, its requests, its search and its plan."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasdl.contract.plan import Plan
from planner.commands.cli import main
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import load_platform, load_prices, load_workload
from planner.model.terms.cost_model import evaluate
from planner.model.terms.exchange_cost import s3_exchange_cost
from planner.model.terms.pipelined import CHUNK_CHOICES, chunk_choices, pipelined_terms
from planner.search.searches import AUTO, BN_RULES, PIPELINED, exact, exhaustive
from tests.examples import examples
from tests.planner.problems import problems, with_duplex
from tests.planner.search_helpers import assert_satisfies_constraints, same_optimum, same_time

SEARCH_SETTINGS = settings(max_examples=examples(40), deadline=None,
                           suppress_health_check=[HealthCheck.too_slow])


def paper(name: str, deadline: float, cap: int, epochs: int, channel: str = "s3") -> Problem:
    return Problem(workload=load_workload(name), platform=load_platform(channel),
                   prices=load_prices(), epochs=epochs, deadline_s=deadline,
                   max_global_batch=cap)


def expected_iteration(problem: Problem, w: int, memory: int, k: int, ba: int, bn: int,
                       bsp: bool) -> float:
    """The pipelined iteration written out from one chunk's transfer times (module doc)."""
    c, wl, platform = problem.exchange_chunks, problem.workload, problem.platform
    chunk_mb = wl.model_mb / (k * c)
    up = float(platform.transfer_time("up", memory, chunk_mb))
    down = float(platform.transfer_time("down", memory, chunk_mb))
    # a worker's chunk as it travels: half the bytes with bfloat16 uploads
    sent_up = float(platform.transfer_time("up", memory, chunk_mb * problem.upload_share))
    sent_down = float(platform.transfer_time("down", memory, chunk_mb * problem.upload_share))
    train_a = float(wl.train_time(ba, memory))
    train_n = float(wl.train_time(bn, memory))
    vcpus = min(memory / 1769, 6.0)
    # a step's CPU at the share, when profiled: back to back (one worker) or once the
    # exchange keeps the share busy, the step costs that
    busy_a, busy_n = (max(train, (wl.cpu_step_s + b * wl.cpu_sample_s) / vcpus)
                      for train, b in ((train_a, ba), (train_n, bn)))
    if w == 1:
        return busy_a
    d = float(platform.duplex_at(memory))

    def both(u: float, v: float) -> float:  # U ∥ D
        return max(u, v, (1 - d / 2) * (u + v))

    up_a = (k - 1) * c * sent_up + c * up  # its other shards, then its merged one
    down_a = (w - 1) * c * sent_down + (k - 1) * c * down  # its shard's copies, merged others
    comm_n = both(k * c * sent_up, k * c * down)
    others = k < w

    _, own, peer = codec_kappas(problem)
    fold = chunk_mb * (own + (w - 1) * peer) / vcpus  # its W copies of one chunk

    def comm_a(lockstep: bool) -> tuple[float, float]:
        published = merged_chunks_up(c, w, k, (up, sent_up, sent_down, fold), lockstep)
        return max(both(up_a, down_a), published + (down if k > 1 else 0.0)), published

    if bsp:
        comm, published = comm_a(True)
        loaded = max(comm_n, published + down) if others else 0.0
        transfers = max(train_a, train_n if others else 0.0) + max(comm, loaded)
    else:
        cross = (train_n + k * c * sent_up + sent_down + up + down) / 2
        transfers = max(train_a + comm_a(False)[0],
                        max(train_n + comm_n, cross) if others else 0.0)
    cpu_a, cpu_n = exchange_cpu(problem, w, k)
    return max(transfers, busy_a + cpu_a / vcpus, busy_n + cpu_n / vcpus if others else 0.0)


def codec_kappas(problem: Problem) -> tuple[float, float, float]:
    """CPU per MB of framing an upload, folding the own shard, folding a peer's copy."""
    p = problem.platform
    if problem.upload_share < 1:  # bfloat16: the codec frames and folds
        return p.cpu_bf16_frame_mb_s, p.cpu_fold_mb_s, p.cpu_bf16_fold_mb_s
    return 0.0, p.cpu_fold_mb_s, p.cpu_fold_mb_s


def exchange_cpu(problem: Problem, w: int, k: int) -> tuple[float, float]:
    """Each role's CPU per iteration from the requests and MB it moves, frames and folds."""
    p, c, u, model = (problem.platform, problem.exchange_chunks, problem.upload_share,
                      problem.workload.model_mb)
    shard = model / k
    frame, own, peer = codec_kappas(problem)
    non_aggregator = (k * c * (p.cpu_up_request_s + p.cpu_down_request_s)
                      + u * model * p.cpu_up_mb_s + model * p.cpu_down_mb_s + model * frame)
    aggregator = (k * c * p.cpu_up_request_s + (u * shard * (k - 1) + shard) * p.cpu_up_mb_s
                  + (w + k - 2) * c * p.cpu_down_request_s
                  + ((w - 1) * u + k - 1) * shard * p.cpu_down_mb_s
                  + (k - 1) * shard * frame + shard * (own + (w - 1) * peer))
    return aggregator, non_aggregator


def merged_chunks_up(c: int, w: int, k: int, seconds: tuple[float, float, float, float],
                     lockstep: bool) -> float:
    """When an aggregator's last merged chunk is up, chunk by chunk: chunk j's copies come
    down one after another on its link and each after its sender uploaded it (in step with
    it: under BSP a non-aggregator, K uploads per chunk; under HAP another aggregator, K − 1);
    it folds them one chunk after another; its other shards go up first, then each merged
    chunk once folded. ``seconds``: t_u, t'_u, t'_d and one chunk's fold."""
    up, sent_up, sent_down, fold = seconds
    per_chunk = k * sent_up if lockstep else (k - 1) * sent_up
    link, folded, ready = 0.0, 0.0, []
    for j in range(c):
        link += (w - 1) * sent_down
        sender = (j + 1) * per_chunk + sent_down if lockstep or k > 1 else 0.0
        folded = max(folded, link, sender) + fold
        ready.append(folded)
    clock = (k - 1) * c * sent_up
    for moment in ready:
        clock = max(clock, moment) + up
    return clock


@settings(max_examples=200, deadline=None)
@given(problem=problems(client_cpu=True), w=st.integers(1, 40), k_share=st.floats(0.0, 1.0),
       memory=st.integers(1, 80).map(lambda step: 128 * step), ba=st.integers(1, 256),
       extra=st.integers(0, 256), chunks=st.sampled_from(CHUNK_CHOICES), bsp=st.booleans(),
       duplex=st.sampled_from([1.0, 0.5, 0.0]), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_iteration_follows_the_chunk_formula(problem: Problem, w: int, k_share: float,
                                             memory: int, ba: int, extra: int, chunks: int,
                                             bsp: bool, duplex: float, dtype: str) -> None:
    k = max(1, round(k_share * w))
    platform = with_duplex(problem.platform, duplex)
    chunked = dataclasses.replace(problem, exchange_chunks=chunks, platform=platform,
                                  exchange_dtype=dtype)
    bn = ba if k == w else ba + extra
    ev = evaluate(chunked, w, memory, k, ba, bn, bsp=bsp)
    assert float(ev.iteration_s[0]) == pytest.approx(
        expected_iteration(chunked, w, memory, k, ba, bn, bsp), rel=1e-9, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(problem=problems(client_cpu=True), w=st.integers(2, 8) | st.integers(2, 1000),
       k_share=st.floats(0.0, 1.0),
       memory=st.integers(1, 80).map(lambda step: 128 * step),
       chunks=st.sampled_from(CHUNK_CHOICES), duplex=st.sampled_from([1.0, 0.5, 0.0]),
       dtype=st.sampled_from(["float32", "bfloat16"]), lockstep=st.booleans())
def test_the_search_bounds_never_exceed_the_aggregator_exchange(
        problem: Problem, w: int, k_share: float, memory: int, chunks: int, duplex: float,
        dtype: str, lockstep: bool) -> None:
    """planner/search/bounds.py prunes with c_a >= max(floor_a, fixed_a + (W−1)·per_peer): a bound
    above c_a would drop a configuration that may win."""
    k = max(1, round(k_share * w))
    chunked = dataclasses.replace(problem, platform=with_duplex(problem.platform, duplex),
                                  exchange_dtype=dtype)
    terms = pipelined_terms(chunked.platform, memory, chunked.workload.model_mb, k, chunks,
                            chunked.upload_share)
    exchange = float(terms.aggregator(w, lockstep=lockstep))
    bound = max(float(terms.floor_a), float(terms.fixed_a + (w - 1) * terms.per_peer))
    assert bound <= exchange * (1 + 1e-12)


def test_duplex_and_streaming_beat_the_phases_on_a_large_model() -> None:
    """ResNet-50 at W = 3, K = 2, M = 1024 on the shipped S3 profile: overlapping upload with
    download must shorten the aggregator's exchange (3.0 s phased) by a quarter at least, even
    though each chunk pays its own request time; 16 chunks of 3 MB pay too much of it."""
    problem = paper("resnet50-cifar10", 8000, 1024, 19)

    def aggregator_exchange(chunks: int) -> float:
        ev = evaluate(dataclasses.replace(problem, exchange_chunks=chunks), 3, 1024, 2, 16, 16)
        if chunks == 1:
            return float(ev.upload_s[0] + ev.aggregate_s[0] + ev.download_s[0])
        return float(ev.aggregate_s[0] + max(ev.upload_s[0], ev.download_s[0]))

    phased = aggregator_exchange(1)
    assert aggregator_exchange(2) < 0.75 * phased and aggregator_exchange(4) < 0.75 * phased
    assert aggregator_exchange(16) > phased


def test_s3_requests_and_their_cost_scale_with_the_chunks() -> None:
    prices = load_prices()
    w, k, iterations = np.array([5]), np.array([2]), np.array([100.0])
    one = s3_exchange_cost(prices, w, k, iterations)
    for chunks in CHUNK_CHOICES:
        chunked = s3_exchange_cost(prices, w, k, iterations, chunks)
        assert chunked[0] == pytest.approx(chunks * one[0])
        # K·W·C PUTs and 2K(W−1)·C GETs per iteration
        assert chunked[0] == pytest.approx(100 * chunks * (prices.s3_put * 10
                                                             + prices.s3_get * 16))


@SEARCH_SETTINGS
@given(problem=problems(small=True, client_cpu=True), rule=st.sampled_from(BN_RULES),
       chunks=st.sampled_from(CHUNK_CHOICES), objective=st.sampled_from(["cost", "time"]),
       duplex=st.sampled_from([1.0, 0.3]), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_exact_equals_exhaustive_for_every_chunk_count(problem: Problem, rule: str,
                                                       chunks: int, objective: str,
                                                       duplex: float, dtype: str) -> None:
    """The branch-and-bound floors hold for the pipelined terms (its c_a has a floor in W,
    and below full duplex the floors are below c_a), with float32 or bfloat16 uploads."""
    platform = with_duplex(problem.platform, duplex)
    chunked = dataclasses.replace(problem, exchange_chunks=chunks, platform=platform,
                                  exchange_dtype=dtype)
    fast = exact(chunked, "kreduce", objective, bn_rule=rule)  # type: ignore[arg-type]
    slow = exhaustive(chunked, "kreduce", objective, bn_rule=rule)  # type: ignore[arg-type]
    assert (same_optimum if objective == "cost" else same_time)(fast, slow), (fast, slow)
    if fast.choice is not None:
        assert fast.choice.exchange_chunks == (chunks if fast.choice.workers > 1 else 1)
        assert_satisfies_constraints(chunked, fast.choice)
        assert fast.evaluated <= slow.evaluated


@SEARCH_SETTINGS
@given(problem=problems(small=True))
def test_the_pattern_is_the_best_chunk_count(problem: Problem) -> None:
    result = exact(problem, PIPELINED)
    counts = chunk_choices(problem.workload.model_mb, problem.worker_limit())
    singles = [exact(dataclasses.replace(problem, exchange_chunks=c)) for c in counts]
    feasible = [s.choice for s in singles if s.choice is not None]
    if not feasible:
        assert result.choice is None and result.reason
        return
    assert result.choice is not None and result.pattern == PIPELINED
    best = min(feasible, key=lambda choice: choice.key())
    assert result.choice.key() == best.key()
    chunked = dataclasses.replace(problem, exchange_chunks=result.choice.exchange_chunks)
    assert_satisfies_constraints(chunked, result.choice)


@settings(SEARCH_SETTINGS, max_examples=examples(15))  # two searches of each kind per example
@given(problem=problems(small=True), objective=st.sampled_from(["cost", "time"]))
def test_auto_is_the_better_of_phased_and_pipelined(problem: Problem, objective: str) -> None:
    """plan's default: whichever K-REDUCE is cheaper (faster for the time objective), the
    phased one on a tie; exact and exhaustive agree on it."""
    phased = exact(problem, "kreduce", objective)  # type: ignore[arg-type]
    pipelined = exact(problem, PIPELINED, objective)  # type: ignore[arg-type]
    chosen = exact(problem, AUTO, objective)  # type: ignore[arg-type]
    slow = exhaustive(problem, AUTO, objective)  # type: ignore[arg-type]
    assert (same_optimum if objective == "cost" else same_time)(chosen, slow), (chosen, slow)
    feasible = [r for r in (phased, pipelined) if r.choice is not None]
    if not feasible:
        assert chosen.choice is None and chosen.reason == phased.reason
        return
    index = 1 if objective == "time" else 0
    ranked = sorted((r.choice.key()[index], r.choice.exchange_chunks, r.pattern)
                    for r in feasible if r.choice is not None)
    assert chosen.choice is not None and chosen.pattern == ranked[0][2]
    assert chosen.choice.key()[index] == ranked[0][0]
    assert chosen.evaluated == phased.evaluated + pipelined.evaluated


def test_plan_considers_the_pipelined_pattern_by_default(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """BERT-base's 417 MB model at a tight deadline: the pipelined exchange is cheaper, so
    plain ``plan`` takes it; ``--pattern kreduce`` keeps the paper's phased one, and so
    does the two-stage heuristic, which searches only that."""
    args = ["--workload", "bert-base-cola", "--deadline", "3000", "--max-global-batch", "1024",
            "--epochs", "3", "--min-workers", "2", "--json"]
    runs = {}
    for name, extra in {"auto": [], "phased": ["--pattern", "kreduce"],
                        "two-stage": ["--search", "two-stage"]}.items():
        assert main(["plan", *args, *extra]) == 0
        runs[name] = json.loads(capsys.readouterr().out)
    auto, phased = runs["auto"], runs["phased"]
    assert auto["search"]["pattern"] == PIPELINED
    assert auto["plan"]["training"]["exchange_chunks"] in CHUNK_CHOICES
    assert auto["plan"]["prediction"]["cost_usd"] < phased["plan"]["prediction"]["cost_usd"]
    assert phased["search"]["pattern"] == "kreduce"
    assert phased["plan"]["training"]["exchange_chunks"] == 1
    assert runs["two-stage"]["plan"]["training"]["exchange_chunks"] == 1
    # the local demo's tiny CNN pays for the chunks' extra requests: phased stays
    assert main(["plan", "--workload", "cnn-digits", "--deadline", "900", "--max-global-batch",
                 "64", "--epochs", "10", "--min-workers", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["search"]["pattern"] == "kreduce"


def test_a_toy_model_gets_a_clean_reason() -> None:
    problem = paper("squeezenet-cifar10", 3000, 384, 20)
    tiny = dataclasses.replace(problem, workload=problem.workload.with_workload(
        model_mb=1e-5))
    result = exact(tiny, PIPELINED)
    assert result.choice is None and "exchange-chunks" in (result.reason or "")


def test_cli_plans_compares_and_writes_the_chunks(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    args = ["--workload", "resnet50-cifar10", "--deadline", "8000", "--max-global-batch",
            "1024", "--epochs", "19", "--min-workers", "2"]
    assert main(["plan", *args, "--pattern", PIPELINED, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    plan = Plan.from_json(out.read_text())
    assert plan.training.exchange_chunks in CHUNK_CHOICES
    assert f"chunks C={plan.training.exchange_chunks}" in text
    assert plan.provenance["pattern"] == PIPELINED
    assert main(["compare", *args[:-2]]) == 0
    assert "K-REDUCE pipelined (exact)" in capsys.readouterr().out
    assert main(["plan", *args, "--pattern", PIPELINED, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["plan"]["training"]["exchange_chunks"] == plan.training.exchange_chunks
