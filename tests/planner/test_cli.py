"""`python -m planner`: the documented commands, exit codes and JSON output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fasdl.contract.plan import Plan
from planner.commands.cli import main

# Table IV constraints with the epochs test_paper.py derives from the paper's own choices.
PAPER = {
    "bert-base-cola": ["--deadline", "2500", "--max-global-batch", "640", "--epochs", "6"],
    "resnet50-cifar10": ["--deadline", "8000", "--max-global-batch", "1024", "--epochs", "19"],
    "mobilenet-cifar10": ["--deadline", "4000", "--max-global-batch", "512", "--epochs", "21"],
    "squeezenet-cifar10": ["--deadline", "3000", "--max-global-batch", "384", "--epochs", "20"],
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def single_json(text: str) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    document = json.loads(lines[0])
    assert isinstance(document, dict)
    return document


@pytest.mark.parametrize("workload", sorted(PAPER))
@pytest.mark.parametrize("channel", ["s3", "valkey"])
@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_plan_works_for_every_paper_workload(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                             workload: str, channel: str, arch: str) -> None:
    out = tmp_path / "plan.json"
    # one worker has no exchange: its cheapest Valkey choice is written as an S3 plan
    exchange = ["--min-workers", "2"] if channel == "valkey" else []
    arguments = list(PAPER[workload])
    if (workload, channel) == ("bert-base-cola", "valkey"):
        # 420 MB of shards, every request at most one hash slot's ~30,000 ECPU/s
        # (planner/model/terms/request_ceiling.py): the paper's 2,500 s are out of reach
        # (test_paper.py's lemma test finds nothing in time there), ~4,400 s are not
        arguments[1] = "5000"
    code, stdout, _ = run(capsys, "plan", "--workload", workload, *arguments, *exchange,
                          "--channel", channel, "--arch", arch, "--out", str(out), "--json")
    document = single_json(stdout)
    assert code == 0
    assert document["status"] == "ok"
    plan = Plan.load(out)
    assert plan.to_dict() == document["plan"]
    assert (plan.deployment.channel, plan.deployment.arch) == (channel, arch)
    assert plan.prediction is not None and plan.prediction.time_s <= float(arguments[1])
    assert plan.provenance["search"] == "exact"


@pytest.mark.parametrize("search", ["two-stage", "exhaustive"])
def test_other_searches(capsys: pytest.CaptureFixture[str], search: str) -> None:
    # a grid the reference walks in seconds (the paper's whole grid took two minutes)
    argv = ["plan", "--workload", "squeezenet-cifar10", *PAPER["squeezenet-cifar10"], "--json",
            "--min-workers", "2", "--literal-early-stop", "--max-memory", "1024",
            "--max-concurrency", "16", "--bn-rule", "align"]
    code, stdout, _ = run(capsys, *argv, "--search", search)
    assert code == 0
    found = single_json(stdout)["search"]
    assert found["method"] == search
    if search == "exhaustive":  # the exact search's optimum, one configuration at a time
        code, stdout, _ = run(capsys, *argv, "--search", "exact")
        assert code == 0 and found["choice"] == single_json(stdout)["search"]["choice"]


def test_human_output_and_patterns(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "plan", "--workload", "mobilenet-cifar10",
                          *PAPER["mobilenet-cifar10"], "--pattern", "allreduce",
                          "--min-workers", "2")
    assert code == 0
    assert "AllReduce" in stdout and "predicted time" in stdout and "K=1" in stdout


@pytest.mark.parametrize(("argv", "argument"), [
    (["--deadline", "-5"], "--deadline"),
    (["--epochs", "0"], "--epochs"),
    (["--epochs", "ten"], "--epochs"),
    (["--max-global-batch", "abc"], "--max-global-batch"),
    (["--workload", "no-such-model"], "--workload"),
    (["--channel", "dynamodb"], "--channel"),
    (["--arch", "riscv"], "--arch"),
    (["--region", "mars-1"], "--region"),
    (["--timeout", "1200"], "--timeout"),
    (["--search", "two-stage", "--pattern", "allreduce"], "--search"),
    (["--search", "two-stage", "--gamma-min", "1.5"], "--gamma-min"),
])
def test_bad_input_exits_2_naming_the_argument(capsys: pytest.CaptureFixture[str],
                                                argv: list[str], argument: str) -> None:
    base = {"--workload": "squeezenet-cifar10", "--deadline": "3000",
            "--max-global-batch": "384", "--epochs": "20"}
    for name, value in zip(argv[::2], argv[1::2], strict=True):
        base[name] = value
    flat = [item for pair in base.items() for item in pair]
    code, stdout, stderr = run(capsys, "plan", *flat, "--json")
    assert code == 2
    document = single_json(stdout)
    assert document["status"] == "error" and document["argument"] == argument
    assert argument in stderr


def test_missing_argument_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, stderr = run(capsys, "plan", "--workload", "squeezenet-cifar10")
    assert code == 2 and "--deadline" in stderr


def test_infeasible_exits_3_naming_the_constraint(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "plan", "--workload", "bert-base-cola", "--deadline", "60",
                          "--max-global-batch", "640", "--epochs", "6", "--json")
    assert code == 3
    document = single_json(stdout)
    assert document["status"] == "infeasible"
    assert document["search"]["reason"].startswith("deadline")
    code, _, stderr = run(capsys, "plan", "--workload", "bert-base-cola", "--deadline", "60",
                          "--max-global-batch", "640", "--epochs", "6")
    assert code == 3 and "infeasible: deadline" in stderr


def test_compare_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "compare", "--workload", "squeezenet-cifar10",
                          *PAPER["squeezenet-cifar10"])
    assert code == 0
    for title in ("K-REDUCE (exact)", "ScatterReduce (exact)", "AllReduce (exact)",
                  "λDNN-style provisioning", "standalone (W=1)", "vs K-REDUCE"):
        assert title in stdout
    code, stdout, _ = run(capsys, "compare", "--workload", "squeezenet-cifar10",
                          *PAPER["squeezenet-cifar10"], "--json")
    results = single_json(stdout)["results"]
    assert [r["method"] for r in results] == ["exact", "two-stage", "exact", "exact", "exact",
                                              "lambda-dnn", "standalone", "exact, any W"]
    assert results[2]["pattern"] == "kreduce-pipelined"
    reference = results[0]["choice"]["cost_usd"]
    # the paper's heuristic and the baselines search within K-REDUCE's grid or below it
    baselines = [results[1], *results[3:6]]
    assert all(r["choice"]["cost_usd"] >= reference * (1 - 1e-12)
               for r in baselines if r["feasible"])


def test_frontier_writes_a_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "frontier.png"
    code, stdout, _ = run(capsys, "frontier", "--workload", "mobilenet-cifar10",
                          *PAPER["mobilenet-cifar10"], "--png", str(png), "--points", "8",
                          "--json")
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves = single_json(stdout)["curves"]
    assert set(curves) == {"kreduce", "kreduce-pipelined", "scatterreduce", "allreduce"}
    costs = [c for c in curves["kreduce"]["cost_usd"] if c is not None]
    assert costs and costs == sorted(costs, reverse=True)


def test_module_entry_point(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    completed = subprocess.run(
        [sys.executable, "-m", "planner", "plan", "--workload", "squeezenet-cifar10",
         *PAPER["squeezenet-cifar10"], "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert single_json(completed.stdout)["out"] == str(out)
    assert Plan.load(out).workload.name == "squeezenet-cifar10"


def test_the_bn_search_is_the_default_and_the_alignment_rule_selectable(
        capsys: pytest.CaptureFixture[str]) -> None:
    chosen = {}
    for rule in ("search", "align"):
        code, stdout, _ = run(capsys, "plan", "--workload", "resnet50-cifar10",
                              "--deadline", "800", "--max-global-batch", "16384",
                              "--epochs", "19", "--bn-rule", rule, "--json")
        assert code == 0
        chosen[rule] = single_json(stdout)["search"]["choice"]
    code, stdout, _ = run(capsys, "plan", "--workload", "resnet50-cifar10", "--deadline", "800",
                          "--max-global-batch", "16384", "--epochs", "19", "--json")
    assert single_json(stdout)["search"]["choice"] == chosen["search"]
    assert chosen["search"]["cost_usd"] <= chosen["align"]["cost_usd"]
