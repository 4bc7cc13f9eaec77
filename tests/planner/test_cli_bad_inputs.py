"""Absurd planner inputs end in exit 2 and one message naming what to change and its range: a
workload file's field (never a made-up --a or --m), --timeout-margin against --timeout, a batch
cap below the batch step, a worker floor above what the cap allows, a grid too big to hold;
and `plan` shows both roles' transfers."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.commands.cli import main
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import load_platform, load_prices, load_workload
from planner.model.terms.exchange_time import non_aggregator_times
from tests.planner.cli_helpers import SMALL, assert_bad, run, workload_file
from tests.planner.fit_samples import fit_args, train_records, write


@pytest.mark.parametrize("m", [-20000, -10240])
@pytest.mark.parametrize("command", [["plan"], ["plan", "--search", "two-stage"],
                                     ["plan", "--search", "exhaustive"], ["compare"]])
def test_an_m_no_lambda_memory_can_run_names_the_file_field(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, m: int, command: list[str]) -> None:
    """M + m <= 0 at every memory up to 10,240 MB: no configuration could train at all."""
    path = workload_file(tmp_path, m=m)
    code, document, stderr = run(capsys, *command, "--workload", path, *SMALL)
    assert_bad(code, document, stderr, "--workload", f"workload file {path}: field 'm'",
               "must be > -10240", f"got {m}", "M + m > 0")


def test_frontier_refuses_the_same_m(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, document, stderr = run(capsys, "frontier", "--workload",
                                 workload_file(tmp_path, m=-20000), *SMALL,
                                 "--png", str(tmp_path / "f.png"))
    assert_bad(code, document, stderr, "--workload", "field 'm'", "must be > -10240")
    assert not (tmp_path / "f.png").exists()


def test_an_m_below_some_memories_is_still_a_workload(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    """A fitted m may be below -M for small M (a tiny model): those memories are infeasible,
    the larger ones plan."""
    code, document, _ = run(capsys, "plan", "--workload", workload_file(tmp_path, m=-3000),
                            "--deadline", "30000", "--max-global-batch", "64", "--epochs", "2")
    assert code == 0, document
    assert document["plan"]["deployment"]["memory_mb"] > 3000


@pytest.mark.parametrize(("field", "value", "fragment"), [
    ("a", -1, "must be > 0.0"), ("a", 0, "must be > 0.0"), ("k", 0, "must be >= 1e-09"),
    ("k", -2, "must be >= 1e-09"), ("c", -1, "must be >= 0.0"), ("samples", 0, "[1, "),
    ("model_mb", 0, "must be > 0.0"), ("dataset_mb", -1, "must be > 0.0"),
    ("b", -1, "a·(B+b) must be > 0"), ("a", True, "must be a finite number"),
])
def test_absurd_workload_numbers_name_the_file_field(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path, field: str, value: object,
                                                     fragment: str) -> None:
    path = workload_file(tmp_path, **{field: value})
    code, document, stderr = run(capsys, "plan", "--workload", path, *SMALL)
    assert_bad(code, document, stderr, "--workload", f"workload file {path}: field '{field}': ",
               fragment)
    assert f"--{field}" not in document["message"].replace("--workload", "")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_workload_numbers_are_refused(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path, literal: str) -> None:
    path = Path(workload_file(tmp_path, a="<a>"))
    path.write_text(path.read_text().replace('"<a>"', literal))
    code, document, stderr = run(capsys, "plan", "--workload", str(path), *SMALL)
    assert_bad(code, document, stderr, "--workload", str(path))


def test_a_platform_file_field_is_named_with_its_file(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    shipped = Path(__file__).parents[2] / "planner" / "data" / "platforms"
    data = json.loads((shipped / "aws-lambda-x86_64-s3.json").read_text())
    data["up_peak"][0] = -1
    path = tmp_path / "platform.json"
    path.write_text(json.dumps(data))
    code, document, stderr = run(capsys, "plan", "--workload", "squeezenet-cifar10",
                                 "--platform", str(path), *SMALL)
    assert_bad(code, document, stderr, "--platform",
               f"platform file {path}: field 'up_peak[0]': must be > 0.0, got -1")


def test_a_fitted_field_out_of_range_blames_the_samples(capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:
    """A fit whose k is beyond the profile's bound: the samples are at fault, not a --k.
    (a and b are fitted within their bounds: the quality gates judge such a fit.)"""
    records = train_records(0.0)
    for record in records:
        record["peak_mb"] *= 1e6
    samples = write(tmp_path / "huge.jsonl", records)
    code, document, stderr = run(capsys, *fit_args(samples, tmp_path / "w.json",
                                                   "--kind", "workload"))
    assert_bad(code, document, stderr, "--samples",
               "profile field 'k' fitted from the samples: must be >= 1e-09 and <= 100000.0")
    assert "--k" not in document["message"]


@pytest.mark.parametrize(("change", "argument", "fragment"), [
    ({"model": "bad model!"}, "--samples", "profile field 'model' fitted from the samples"),
])
def test_a_fitted_name_from_the_samples_blames_the_samples(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, change: dict[str, Any],
        argument: str, fragment: str) -> None:
    records = [{**record, **change} for record in train_records(0.0)]
    samples = write(tmp_path / "s.jsonl", records)
    code, document, stderr = run(capsys, *fit_args(samples, tmp_path / "w.json",
                                                   "--kind", "workload"))
    assert_bad(code, document, stderr, argument, fragment)


def test_a_bad_dataset_size_blames_dataset_samples(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    """The profile's 'samples' field comes from --dataset-samples, not the --samples files."""
    samples = write(tmp_path / "s.jsonl", train_records(0.0))
    argv = fit_args(samples, tmp_path / "w.json", "--kind", "workload")
    argv[argv.index("--dataset-samples") + 1] = "0"
    code, document, stderr = run(capsys, *argv)
    assert_bad(code, document, stderr, "--dataset-samples", "profile field 'samples'", "got 0")


def test_the_timeout_margin_defaults_to_a_share_of_the_timeout(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--timeout 60 alone plans: the default margin is min(60 s, 10 % of the timeout)."""
    code, document, _ = run(capsys, "plan", "--workload", "squeezenet-cifar10", *SMALL,
                            "--timeout", "60")
    assert code == 0, document
    plan = document["plan"]
    assert plan["deployment"]["timeout_s"] == 60
    segment = (plan["prediction"]["breakdown"]["load_s"]
               + plan["prediction"]["breakdown"]["checkpoint_s"]
               + plan["training"]["segment_iterations"]
               * plan["prediction"]["breakdown"]["iteration_s"])
    assert segment <= 60 - 6 + 1e-6


@pytest.mark.parametrize(("timeout", "margin", "high"), [
    ("60", "60", "30"), ("60", "30.5", "30"), ("900", "900", "450"), ("300", "-1", "150"),
    ("60", "nan", "30"),
])
def test_an_explicit_margin_out_of_range_names_itself(capsys: pytest.CaptureFixture[str],
                                                      timeout: str, margin: str,
                                                      high: str) -> None:
    code, document, stderr = run(capsys, "plan", "--workload", "squeezenet-cifar10", *SMALL,
                                 "--timeout", timeout, "--timeout-margin", margin)
    assert_bad(code, document, stderr, "--timeout-margin", f"must be in [0, {high}] s",
               f"--timeout {timeout}")


@pytest.mark.parametrize("cap", ["1", "8", "15"])
def test_a_cap_below_the_batch_step_names_max_global_batch(capsys: pytest.CaptureFixture[str],
                                                           cap: str) -> None:
    code, document, stderr = run(capsys, "plan", "--workload", "squeezenet-cifar10",
                                 "--deadline", "3000", "--epochs", "2",
                                 "--max-global-batch", cap)
    assert_bad(code, document, stderr, "--max-global-batch", "must be in [16, 65536]",
               "multiples of 16", f"got {cap}")
    assert "memory" not in document["message"]


def test_a_worker_floor_the_cap_cannot_feed_names_min_workers(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, document, stderr = run(capsys, "plan", "--workload", "squeezenet-cifar10", *SMALL,
                                 "--min-workers", "1000", "--max-concurrency", "1000000")
    assert_bad(code, document, stderr, "--min-workers", "must be in [1, 4]", "got 1000")


@pytest.mark.parametrize("cap", ["65537", "1000000"])
def test_a_cap_beyond_the_measured_range_is_refused_before_the_search(
        capsys: pytest.CaptureFixture[str], cap: str) -> None:
    code, document, stderr = run(capsys, "plan", "--workload", "squeezenet-cifar10",
                                 "--deadline", "3000", "--epochs", "2",
                                 "--max-global-batch", cap)
    assert_bad(code, document, stderr, "--max-global-batch", "must be in [16, 65536]",
               "lower it", f"got {cap}")


def test_two_stage_refuses_the_bn_search(capsys: pytest.CaptureFixture[str]) -> None:
    code, document, stderr = run(capsys, "plan", "--workload", "squeezenet-cifar10", *SMALL,
                                 "--search", "two-stage", "--bn-rule", "search")
    assert_bad(code, document, stderr, "--bn-rule", "alignment rule", "--search exact")


@pytest.mark.parametrize("command", ["plan", "compare"])
def test_running_out_of_memory_names_the_flag_to_lower(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       command: str) -> None:
    def no_memory(*_: object, **__: object) -> None:
        raise MemoryError

    monkeypatch.setattr("planner.commands.cli.exact", no_memory)
    code, document, stderr = run(capsys, command, "--workload", "squeezenet-cifar10", *SMALL)
    assert_bad(code, document, stderr, "--max-global-batch", "ran out of memory",
               "16-65536")


def iteration_times(text: str, role: str) -> dict[str, float]:
    line = next(line for line in text.splitlines() if line.strip().startswith(role + " "))
    return {name: float(value) for name, value in re.findall(r"(\w+) ([\d.]+) s", line)}


def test_plan_shows_both_roles_transfers(capsys: pytest.CaptureFixture[str]) -> None:
    """K = 1: the aggregator keeps its shard (0 s up and down); the non-aggregators' transfers,
    which set the iteration, are shown too."""
    # mobilenet: resnet50's HAP checkpoints (W - K parameter copies, priced as storage) now
    # make K = 2 its cheapest choice
    argv = ["plan", "--workload", "mobilenet-cifar10", "--deadline", "8000",
            "--max-global-batch", "1024", "--epochs", "19", "--min-workers", "2",
            "--pattern", "kreduce"]  # the phased transfers
    assert main([*argv, "--json"]) == 0
    choice = json.loads(capsys.readouterr().out)["plan"]
    assert choice["training"]["aggregators"] == 1 < choice["deployment"]["workers"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    aggregator = iteration_times(text, "aggregator")
    others = iteration_times(text, "non-aggregator")
    assert aggregator["upload"] == aggregator["download"] == 0.0
    problem = Problem(workload=load_workload("mobilenet-cifar10"), platform=load_platform("s3"),
                      prices=load_prices(), epochs=19, deadline_s=8000, max_global_batch=1024)
    up, down = non_aggregator_times(problem, np.array([choice["deployment"]["memory_mb"]]),
                                    np.array([1]))
    assert others["upload"] == pytest.approx(float(up[0]), abs=1e-3) and others["upload"] > 0
    assert others["download"] == pytest.approx(float(down[0]), abs=1e-3)
    head = re.search(r"per iteration ([\d.]+) s", text)
    assert head is not None
    iteration = float(head.group(1))
    assert iteration == pytest.approx(others["train"] + others["upload"] + others["download"],
                                      abs=2e-3)


def test_plan_says_when_the_cpu_sets_the_iteration(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    argv = ["plan", "--workload", "squeezenet-cifar10", "--deadline", "100000",
            "--max-global-batch", "384", "--epochs", "1", "--min-workers", "2"]
    assert main(argv) == 0
    assert "CPU at" not in capsys.readouterr().out  # the shipped profile measured no CPU
    heavy = dataclasses.replace(load_platform("s3"), cpu_up_request_s=0.5, cpu_down_mb_s=0.2)
    path = tmp_path / "platform.json"
    path.write_text(json.dumps(heavy.to_dict()))
    assert main([*argv, "--platform", str(path)]) == 0
    text = capsys.readouterr().out
    line = re.search(r"CPU at ([\d.]+) vCPU: aggregator ([\d.]+) s.*\(sets the iteration\)",
                     text)
    head = re.search(r"per iteration ([\d.]+) s", text)
    assert line is not None and head is not None, text
    assert float(line.group(2)) == pytest.approx(float(head.group(1)), abs=2e-3)


def test_scatterreduce_has_no_non_aggregator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--workload", "squeezenet-cifar10", "--deadline", "3000",
                 "--max-global-batch", "384", "--epochs", "20", "--pattern", "scatterreduce",
                 "--min-workers", "2"]) == 0
    text = capsys.readouterr().out
    assert "non-aggregator  none (K = W)" in text
    assert iteration_times(text, "aggregator")["upload"] > 0
