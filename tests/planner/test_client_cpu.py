"""The exchange's client CPU (planner/model/terms/client_cpu.py): fitted from the profiler's
samples, charged per role and iteration as (CPU_train + CPU_exchange)/vCPUs(M), stored in the
profiles."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest

from fasdl.exchange.inflight import downloads_at_once
from planner.fit.client_cpu import fit_client_cpu
from planner.fit.profiler import fit_workload
from planner.fit.samples import SampleError, TrainSample, TransferRecord, read_samples
from planner.model.inputs.problem import Problem
from planner.model.inputs.profile_fields import ProfileError
from planner.model.inputs.profiles import (
    CPU_FIELDS,
    PlatformProfile,
    WorkloadProfile,
    load_platform,
    load_prices,
    load_workload,
)
from planner.model.terms.client_cpu import exchange_cpu_bounds
from planner.model.terms.cost_model import evaluate
from planner.model.terms.exchange_time import communication_times

KAPPA = {"cpu_up_request_s": 0.004, "cpu_up_mb_s": 0.002, "cpu_down_request_s": 0.003,
         "cpu_down_mb_s": 0.0015, "cpu_fold_mb_s": 0.001, "cpu_bf16_frame_mb_s": 0.0025,
         "cpu_bf16_fold_mb_s": 0.0035}


def records(noise: float = 0.0) -> list[TransferRecord]:
    draw = random.Random(7)
    found = []
    for memory in (512.0, 1024.0):
        for size in (0.5, 2.0, 8.0):
            for direction in ("up", "down"):
                request = KAPPA[f"cpu_{direction}_request_s"]
                per_mb = KAPPA[f"cpu_{direction}_mb_s"]
                cpu = (request + per_mb * size) * (1 + noise * draw.uniform(-1, 1))
                fold = KAPPA["cpu_fold_mb_s"] * size if direction == "down" else None
                codec = KAPPA["cpu_bf16_frame_mb_s" if direction == "up"
                              else "cpu_bf16_fold_mb_s"] * size
                found.append(TransferRecord(memory, "s3", direction, size, 0.1, "x86_64",
                                            cpu, fold, codec))
    return found


def test_the_fit_recovers_the_coefficients() -> None:
    fitted = fit_client_cpu(records(noise=0.02), "s3")
    for name, value in KAPPA.items():
        assert fitted[name] == pytest.approx(value, rel=0.1), name


def test_the_arithmetic_is_charged_at_the_large_sizes_cost_per_mb() -> None:
    # under a CPU cap small arrays stay in cache and cost less per MB; a run's never do
    def per_mb(size: float) -> float:
        return 0.0007 if size <= 2.0 else 0.0016
    found = [TransferRecord(512.0, "s3", direction, size, 0.1, "x86_64", 0.001,
                            per_mb(size) * size if direction == "down" else None,
                            per_mb(size) * size)
             for size in (0.0625, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0) for direction in ("up", "down")]
    fitted = fit_client_cpu(found, "s3")
    for name in ("cpu_fold_mb_s", "cpu_bf16_frame_mb_s", "cpu_bf16_fold_mb_s"):
        assert fitted[name] == pytest.approx(0.0016, rel=0.02), name


def test_the_fit_never_returns_a_negative_coefficient_and_zeros_without_cpu() -> None:
    # CPU falling with size would give a negative slope: it is clipped to 0
    falling = [dataclasses.replace(r, cpu_s=0.01 - 0.001 * r.size_mb) for r in records()]
    assert all(value >= 0 for value in fit_client_cpu(falling, "s3").values())
    untimed = [dataclasses.replace(r, cpu_s=None, fold_cpu_s=None, bf16_cpu_s=None)
               for r in records()]
    assert set(fit_client_cpu(untimed, "s3").values()) == {0.0}
    assert set(fit_client_cpu(records(), "valkey").values()) == {0.0}  # other channel


def problem_with(kappa: dict[str, float], chunks: int = 1) -> Problem:
    platform = dataclasses.replace(load_platform("s3"), **kappa)  # type: ignore[arg-type]
    return Problem(workload=load_workload("squeezenet-cifar10"), platform=platform,
                   prices=load_prices(), epochs=1, deadline_s=10_000.0, max_global_batch=1024,
                   exchange_chunks=chunks)


@pytest.mark.parametrize("chunks", [1, 4])
def test_a_large_cpu_sets_the_iteration_as_written_out(chunks: int) -> None:
    """W = 3, K = 2 at 512 MB (0.289 vCPU): each role's CPU counted by hand."""
    heavy = {name: 50 * value for name, value in KAPPA.items()}
    problem = problem_with(heavy, chunks)
    w, k, memory, ba, bn = 3, 2, 512, 16, 48
    shard, c = problem.workload.model_mb / k, chunks
    aggregator = (k * c * heavy["cpu_up_request_s"]
                  + (shard + shard) * heavy["cpu_up_mb_s"]  # its other shard, its merged one
                  + (w + k - 2) * c * heavy["cpu_down_request_s"]
                  + (w - 1 + k - 1) * shard * heavy["cpu_down_mb_s"]
                  + w * shard * heavy["cpu_fold_mb_s"])
    non_aggregator = (k * c * (heavy["cpu_up_request_s"] + heavy["cpu_down_request_s"])
                      + problem.workload.model_mb  # all K shards up, all merged ones down
                      * (heavy["cpu_up_mb_s"] + heavy["cpu_down_mb_s"]))
    vcpus = memory / 1769
    train_a, train_n = (float(problem.workload.train_time(b, memory)) for b in (ba, bn))
    expected = max(train_a + aggregator / vcpus, train_n + non_aggregator / vcpus)
    ev = evaluate(problem, w, memory, k, ba, bn)
    assert float(ev.iteration_s[0]) == pytest.approx(expected, rel=1e-9)
    # without the CPU the transfers alone set a shorter iteration
    assert float(evaluate(problem_with({}, chunks), w, memory, k, ba, bn).iteration_s[0]) \
        < 0.9 * expected


def test_bfloat16_uploads_are_charged_the_codecs_framing_and_folds() -> None:
    float32 = problem_with(KAPPA)
    bf16 = dataclasses.replace(float32, exchange_dtype="bfloat16")
    w, k, memory = 4, 2, 1769  # one vCPU: the bound is the CPU itself
    shard, model = float32.workload.model_mb / k, float32.workload.model_mb
    cpu_a, cpu_n = (float(x) for x in exchange_cpu_bounds(bf16, w, memory, k))
    sent_a, sent_n = (float(x) for x in exchange_cpu_bounds(
        dataclasses.replace(bf16, platform=dataclasses.replace(
            bf16.platform, cpu_bf16_frame_mb_s=0.0, cpu_bf16_fold_mb_s=0.0,
            cpu_fold_mb_s=0.0)), w, memory, k))  # the transfers' CPU alone
    assert cpu_n - sent_n == pytest.approx(model * KAPPA["cpu_bf16_frame_mb_s"])
    assert cpu_a - sent_a == pytest.approx(
        (k - 1) * shard * KAPPA["cpu_bf16_frame_mb_s"]  # its other shard, framed
        + shard * KAPPA["cpu_fold_mb_s"]  # its own shard, folded as it is
        + (w - 1) * shard * KAPPA["cpu_bf16_fold_mb_s"])  # each peer's bfloat16 copy
    # float32 uploads pay neither
    plain_a, plain_n = (float(x) for x in exchange_cpu_bounds(float32, w, memory, k))
    assert plain_a < cpu_a and plain_n < cpu_n


def test_no_cpu_leaves_the_model_unchanged_and_a_single_worker_pays_none() -> None:
    plain, light = problem_with({}), problem_with(KAPPA)
    assert [float(x) for x in exchange_cpu_bounds(plain, 4, 1024, 2)] == [0.0, 0.0]
    cpu_a, cpu_n = exchange_cpu_bounds(light, [1, 4], 1024, 1)
    assert cpu_a[0] == cpu_n[0] == 0.0 and cpu_a[1] > 0 and cpu_n[1] > 0
    # above 1,769 MB the CPU is spread over more vCPUs
    assert exchange_cpu_bounds(light, 4, 3538, 2)[0] == pytest.approx(
        exchange_cpu_bounds(light, 4, 1769, 2)[0] / 2)


def test_the_profile_file_round_trips_and_rejects_a_negative_coefficient() -> None:
    shipped = load_platform("valkey")
    assert not set(CPU_FIELDS) & set(shipped.to_dict())  # not measured: files unchanged
    profiled = dataclasses.replace(shipped, **KAPPA)  # type: ignore[arg-type]
    again = PlatformProfile.from_dict(json.loads(json.dumps(profiled.to_dict())))
    assert again == profiled
    with pytest.raises(ProfileError, match="cpu_down_mb_s"):
        PlatformProfile.from_dict({**profiled.to_dict(), "cpu_down_mb_s": -0.1})


def test_samples_with_a_bad_cpu_time_name_the_field_and_line(tmp_path: Path) -> None:
    line = {"kind": "transfer", "memory_mb": 512, "channel": "s3", "direction": "up",
            "size_mb": 1.0, "seconds": 0.1, "cpu_s": -1}
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(SampleError, match=r"samples.jsonl:1: field 'cpu_s'"):
        read_samples([path])
    path.write_text(json.dumps({**line, "cpu_s": 0.002, "fold_cpu_s": 0.0}) + "\n")
    record = read_samples([path]).transfer[0]
    assert (record.cpu_s, record.fold_cpu_s) == (0.002, 0.0)


# ---- a training iteration's CPU (the workload profile's cpu_step_s, cpu_sample_s) ------------

def train_samples(step: float, per_sample: float, noise: float = 0.0) -> list[TrainSample]:
    draw = random.Random(3)
    return [TrainSample(memory, batch, 0.01 * batch, 100.0 + batch, "cnn", 0.1,
                        (step + per_sample * batch) * (1 + noise * draw.uniform(-1, 1)))
            for memory in (512.0, 1024.0) for batch in (16, 32, 64, 128)]


def test_the_workload_fit_recovers_a_training_iterations_cpu() -> None:
    fitted = fit_workload(train_samples(0.004, 0.0005, noise=0.02))
    assert fitted.cpu_step_s == pytest.approx(0.004, rel=0.15)
    assert fitted.cpu_sample_s == pytest.approx(0.0005, rel=0.05)
    unmeasured = [dataclasses.replace(s, cpu_s=None) for s in train_samples(0.004, 0.0005)]
    unmeasured[1:] = [dataclasses.replace(s, cpu_s=0.1) for s in unmeasured[1:]]
    assert (fit_workload(unmeasured).cpu_step_s, fit_workload(unmeasured).cpu_sample_s) \
        == (0.0, 0.0)  # one sample without its CPU: the line is not fitted


def test_a_training_cpu_above_t_train_sets_the_iteration_and_files_round_trip() -> None:
    problem = problem_with(KAPPA, chunks=4)
    w, k, memory, ba, bn = 3, 2, 512, 16, 48
    before = float(evaluate(problem, w, memory, k, ba, bn).iteration_s[0])
    cpu_a, cpu_n = (float(x) for x in exchange_cpu_bounds(problem, w, memory, k))
    workload = dataclasses.replace(problem.workload, cpu_step_s=0.5, cpu_sample_s=0.01)
    vcpus = memory / 1769
    expected = max((0.5 + 0.01 * ba) / vcpus + cpu_a, (0.5 + 0.01 * bn) / vcpus + cpu_n)
    assert expected > before
    heavy = dataclasses.replace(problem, workload=workload)
    assert float(evaluate(heavy, w, memory, k, ba, bn).iteration_s[0]) == pytest.approx(
        expected, rel=1e-9)
    # a CPU below T_train changes nothing: T_train already holds it
    light = dataclasses.replace(problem, workload=dataclasses.replace(
        problem.workload, cpu_step_s=1e-6, cpu_sample_s=0.0))
    assert float(evaluate(light, w, memory, k, ba, bn).iteration_s[0]) == before
    assert "cpu_step_s" not in problem.workload.to_dict()  # shipped files stay as they were
    assert WorkloadProfile.from_dict(json.loads(json.dumps(workload.to_dict()))) == workload
    with pytest.raises(ProfileError, match="cpu_sample_s"):
        WorkloadProfile.from_dict({**workload.to_dict(), "cpu_sample_s": -1.0})


def test_train_samples_carry_their_cpu(tmp_path: Path) -> None:
    line = {"kind": "train", "memory_mb": 512, "batch": 16, "seconds": 0.02, "model": "cnn",
            "cpu_s": 0.005}
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps(line) + "\n")
    assert read_samples([path]).train[0].cpu_s == 0.005
    path.write_text(json.dumps({**line, "cpu_s": "fast"}) + "\n")
    with pytest.raises(SampleError, match=r"samples.jsonl:1: field 'cpu_s'"):
        read_samples([path])


def test_an_aggregator_that_fetches_one_frame_at_a_time_folds_in_series() -> None:
    """Valkey at 512 MB: C = 25.6 MB holds one 4.7 MB read at 3 copies, so the next GET waits
    for each fold (measured: docs/results.md, "A fresh cache and a hot key"); at 3,008 MB C
    holds four and only its own shard's and the last peer's folds follow the downloads."""
    kappa = {"cpu_fold_mb_s": KAPPA["cpu_fold_mb_s"]}
    folding, plain = (dataclasses.replace(problem_with(k), platform=dataclasses.replace(
        load_platform("valkey"), **k)) for k in (kappa, {}))  # type: ignore[arg-type]
    model, w, k = folding.workload.model_mb, 4, 1
    assert downloads_at_once(512, model, model, "valkey") == 1
    assert downloads_at_once(512, model, model, "s3") == 5
    assert downloads_at_once(3008, model, model, "valkey") == 4
    for memory, folds_in_series in ((512, w), (3008, 2)):
        fold = model * KAPPA["cpu_fold_mb_s"] / (memory / 1769)
        aggregate = communication_times(folding, np.array([w]), np.array([memory]),
                                        np.array([k]))[1]
        unfolded = communication_times(plain, np.array([w]), np.array([memory]),
                                       np.array([k]))[1]
        assert float(aggregate[0] - unfolded[0]) == pytest.approx(folds_in_series * fold)
    # a single worker folds nothing
    assert float(communication_times(folding, np.array([1]), np.array([512]),
                                     np.array([1]))[1][0]) == 0.0
