"""The pure logic the local benchmarks rely on: EMF parsing, results sections, verdicts."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.local_runs import (
    BenchError,
    Config,
    fixed_choice,
    local_workload,
    problem_for,
    relative_error,
    worker_iteration_times,
    write_plan,
)
from bench.patterns import same_config_pipelined, table, verdicts
from bench.readme import RESULTS_DOC, MarkerMissing, image, update_section
from fasdl.contract.limits import MAX_DEADLINE_S
from fasdl.contract.plan import Plan
from planner.model.inputs.profiles import load_platform, load_workload
from planner.model.terms.cost_model import aligned_non_aggregator_batch, evaluate
from planner.model.terms.pipelined import chunk_choices
from planner.search.searches import choice_from


def _emf(values: list[float]) -> str:
    return json.dumps({"_aws": {"CloudWatchMetrics": []}, "IterationTime": values,
                       "ComputeTime": [0.0] * len(values)})


def test_iteration_times_come_from_each_workers_first_invocation(tmp_path: Path) -> None:
    (tmp_path / "ComputeWorkerAB-s00000-a0-w0000-0123abcd.log").write_text(
        "starting\n" + _emf([0.5, 0.1]) + "\nnoise {\n" + _emf([0.2]) + "\n")
    (tmp_path / "ComputeWorkerAB-s00000-a0-w0001-89abcdef.log").write_text(_emf([0.3, 0.4]))
    # a later attempt of worker 1 sorts after the first and is ignored
    (tmp_path / "ComputeWorkerAB-s00000-a1-w0001-00000000.log").write_text(_emf([9.0]))
    (tmp_path / "ComputeTriggerCD-next-01234567.log").write_text(_emf([7.0]))
    times = worker_iteration_times(tmp_path)
    assert times == {0: [0.5, 0.1, 0.2], 1: [0.3, 0.4]}


def test_readme_section_is_replaced_between_its_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# t\n<!-- bench:x -->\nold\n<!-- /bench:x -->\ntail\n")
    update_section("x", "| new |\n", readme)
    update_section("x", "| newer |", readme)
    assert readme.read_text() == "# t\n<!-- bench:x -->\n| newer |\n<!-- /bench:x -->\ntail\n"
    with pytest.raises(MarkerMissing, match="bench:y"):
        update_section("y", "z", readme)


# The benchmarks that rewrite a table (bench.prediction, bench.patterns [--channel valkey]).
SECTIONS = ("prediction", "patterns", "patterns-valkey")


def test_results_doc_holds_every_benchmark_section_and_the_readme_none() -> None:
    text = RESULTS_DOC.read_text()
    readme = (RESULTS_DOC.parent.parent / "README.md").read_text()
    for name in SECTIONS:
        begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
        assert text.count(begin) == text.count(end) == 1, name
        section = text.split(begin, 1)[1].split(end, 1)[0]
        links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section)
        assert links, f"{name}: the section has no plot"
        for link in links:  # relative to docs/results.md, as a Markdown viewer resolves them
            assert (RESULTS_DOC.parent / link).is_file(), f"{name}: {link} does not exist"
        assert begin not in readme and end not in readme, f"README.md still holds {name}"


def test_images_are_linked_relative_to_the_results_doc(tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "results.md"
    assert image("patterns", tmp_path / "docs" / "results" / "patterns.png", doc) == (
        "![patterns](results/patterns.png)")
    assert image("p", RESULTS_DOC.parent / "results" / "prediction.png") == (
        "![p](results/prediction.png)")


def test_fixed_choice_is_the_models_evaluation_of_exactly_that_config() -> None:
    problem = problem_for(load_workload("squeezenet-cifar10"), load_platform("s3"), epochs=2,
                          max_global_batch=1024)
    config = Config("c", workers=4, memory_mb=2048, aggregators=2, batch_aggregator=64)
    choice = fixed_choice(problem, config)
    bn = aligned_non_aggregator_batch(problem, [4], [2048], [2], [64])
    expected = evaluate(problem, [4], [2048], [2], [64], bn)
    assert (choice.workers, choice.memory_mb, choice.aggregators) == (4, 2048, 2)
    assert choice.batch_non_aggregator == int(bn[0])
    assert choice.breakdown["iteration_s"] == pytest.approx(float(expected.iteration_s[0]))
    with pytest.raises(BenchError, match="memory"):
        fixed_choice(problem, Config("tiny", workers=2, memory_mb=128, aggregators=1,
                                     batch_aggregator=512))


def test_a_same_config_row_the_model_finds_past_memory_is_refused_not_run() -> None:
    """bench.patterns' bfloat16 row takes K-REDUCE's configuration; bf16 uploads keep the
    residual and the last merged model too, so at K-REDUCE's M the model can refuse it (at
    b1713ee a Valkey run of such a row was killed at 1,032 of 1,024 MB and stopped the bench)."""
    problem = problem_for(load_workload("resnet50-cifar10"), load_platform("valkey"), epochs=1,
                          max_global_batch=256, workers=3, memory_mb=1024)
    kreduce = choice_from(evaluate(problem, [3], [1024], [2], [16], [32]), 0, 1)
    float32 = same_config_pipelined(problem, kreduce)
    assert (float32.workers, float32.memory_mb, float32.aggregators) == (3, 1024, 2)
    assert float32.exchange_chunks > 1
    with pytest.raises(BenchError, match="bfloat16 uploads is infeasible: memory: "):
        same_config_pipelined(replace(problem, exchange_dtype="bfloat16"), kreduce)


def test_a_same_config_row_takes_the_chunk_count_the_model_predicts_fastest() -> None:
    """The row measures what pipelining does to K-REDUCE's epoch, so its C is the fastest
    (by cost, the Valkey cache's metered minimum, which falls with smaller chunks, can favour a
    slower C)."""
    problem = problem_for(load_workload("squeezenet-cifar10"), load_platform("valkey"),
                          epochs=1, max_global_batch=256, workers=4, memory_mb=1024)
    kreduce = choice_from(evaluate(problem, [4], [1024], [1], [32], [32]), 0, 1)
    chosen = same_config_pipelined(problem, kreduce)
    times = {chunks: float(evaluate(replace(problem, exchange_chunks=chunks), [4], [1024], [1],
                                     [32], [32]).time_s[0])
             for chunks in chunk_choices(problem.workload.model_mb, 1)}
    assert len(times) > 1 and chosen.exchange_chunks == min(times, key=times.__getitem__)
    assert chosen.time_s == pytest.approx(min(times.values()))


def test_relative_error_is_against_the_measurement() -> None:
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert relative_error(0.9, 1.0) == pytest.approx(0.1)


def _row(case: str, pattern: str, predicted: float, measured: float) -> dict[str, Any]:
    return {"case": case, "pattern": pattern, "predicted_s": predicted, "measured_s": measured,
            "model_mb": 1.0, "workers": 3, "memory_mb": 1024, "aggregators": 1, "chunks": 1,
            "batch_aggregator": 8, "batch_non_aggregator": 8, "sync": "bsp", "cost_usd": 0.1}


def test_a_baseline_that_does_not_fit_is_left_out_of_the_verdict() -> None:
    rows = [_row("a", "kreduce", 1.0, 2.0), _row("a", "scatterreduce", 2.0, 3.0),
            {"case": "a", "pattern": "allreduce", "model_mb": 1.0,
             "infeasible": "no feasible allreduce"},
            _row("a", "pipelined-same", 0.8, 1.2), _row("a", "kreduce-pipelined", 0.7, 1.0)]
    found = verdicts(rows)["a"]
    assert found["kreduce_vs_best_baseline"] == pytest.approx(2.0 / 3.0, abs=1e-3)
    assert found["predicted_order"] == found["measured_order"] == ["kreduce", "scatterreduce"]
    assert "no feasible allreduce | - |" in table(rows)


def test_pattern_verdicts_compare_with_the_better_baseline() -> None:
    rows = [_row("a", "kreduce", 1.0, 2.0), _row("a", "scatterreduce", 2.0, 3.0),
            _row("a", "allreduce", 3.0, 1.5), _row("a", "pipelined-same", 0.8, 1.2),
            _row("a", "kreduce-pipelined", 0.7, 1.0),
            _row("b", "kreduce", 1.0, 1.0), _row("b", "scatterreduce", 2.0, 1.02),
            _row("b", "allreduce", 3.0, 4.0), _row("b", "pipelined-same", 0.9, 0.9),
            _row("b", "kreduce-pipelined", 0.9, 0.95), _row("b", "pipelined-bf16-same", 0.6, 0.7)]
    found = verdicts(rows)
    assert not found["a"]["kreduce_not_slower"] and not found["a"]["ranking_holds"]
    assert found["a"]["kreduce_vs_best_baseline"] == pytest.approx(2.0 / 1.5, abs=1e-3)
    assert found["b"]["kreduce_not_slower"] and found["b"]["ranking_holds"]
    # the pipelined ratios are over K-REDUCE's measured epoch, same config and planned
    assert found["a"]["pipelined_vs_kreduce_epoch_ratio"] == pytest.approx(0.6)
    assert found["a"]["planned_pipelined_vs_kreduce_epoch_ratio"] == pytest.approx(0.5)
    assert found["b"]["pipelined_vs_kreduce_epoch_ratio"] == pytest.approx(0.9)
    assert found["a"]["pipelined_goal"] is None and not found["a"]["pipelined_met"]
    # the bfloat16 row is over K-REDUCE's too; a run without it says None
    assert found["b"]["pipelined_bf16_vs_kreduce_epoch_ratio"] == pytest.approx(0.7)
    assert found["a"]["pipelined_bf16_vs_kreduce_epoch_ratio"] is None


def test_a_problem_without_a_binding_deadline_makes_a_plan_the_contract_takes(
        tmp_path: Path) -> None:
    # a deadline of 1e8 s made every local-run bench a contract error before it measured
    problem = problem_for(local_workload(load_workload("cnn-digits")), load_platform("s3"),
                          epochs=1, max_global_batch=128, workers=2, memory_mb=1024)
    choice = fixed_choice(problem, Config("c", workers=2, memory_mb=1024, aggregators=1,
                                          batch_aggregator=32))
    plan = write_plan(problem, choice, tmp_path / "plan.json", channel="s3")
    assert plan.limits is not None and plan.limits.deadline_s <= MAX_DEADLINE_S
    assert Plan.from_json((tmp_path / "plan.json").read_text()) == plan


def test_verdicts_of_a_case_whose_baselines_did_not_run_are_none() -> None:
    found = verdicts([_row("a", "kreduce", 1.0, 2.0)])["a"]
    assert found["kreduce_vs_best_baseline"] is None and found["kreduce_not_slower"] is None
    assert found["pipelined_vs_kreduce_epoch_ratio"] is None and found["pipelined_met"] is None
    assert found["measured_order"] == ["kreduce"] and found["ranking_holds"]
