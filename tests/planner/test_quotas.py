"""Account quotas (--max-concurrency, --max-memory) are hard constraints of every search and
baseline; infeasibility they cause is named; bad values are named; plans record them."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fasdl.contract.plan import Plan
from planner.commands.cli import main
from planner.model.inputs.problem import Problem, Violation
from planner.model.inputs.profiles import load_platform, load_prices, load_workload
from planner.search.heuristic import lambda_dnn, standalone, two_stage
from planner.search.quotas import Quotas, Search, limit_memory, limit_workers, search_within
from planner.search.searches import SearchResult, exact, exhaustive
from tests.examples import examples
from tests.planner.problems import problems
from tests.planner.search_helpers import assert_satisfies_constraints, same_optimum

QUOTA_SETTINGS = settings(max_examples=examples(40), deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
QUOTA_NAMES = {"max-memory", "max-concurrency", "max-memory and max-concurrency"}
NAMES = {"memory", "max-global-batch", "alignment", "dataset", "lambda-timeout", "deadline",
         *QUOTA_NAMES}
# Small problems (tests/planner/problems.py) stop at 2048 MB and 8 workers.
small_quotas = st.builds(Quotas, max_concurrency=st.integers(2, 20),
                         max_memory_mb=st.integers(128, 2200))
SEARCHES: dict[str, Search] = {
    "kreduce": exact, "scatterreduce": partial(exact, pattern="scatterreduce"),
    "allreduce": partial(exact, pattern="allreduce"), "two-stage": two_stage,
    "lambda-dnn": lambda_dnn, "standalone": standalone,
}


def assert_within(result: SearchResult, quotas: Quotas) -> None:
    if result.choice is not None:
        assert result.choice.memory_mb <= quotas.max_memory_mb
        assert 2 * result.choice.workers <= quotas.max_concurrency
    elif result.violation in (Violation.MAX_MEMORY, Violation.MAX_CONCURRENCY):
        assert (result.reason or "").split(":")[0] in QUOTA_NAMES
    else:
        assert result.reason  # λDNN's own wording may name no constraint


@QUOTA_SETTINGS
@given(problem=problems(small=True), quotas=small_quotas)
def test_every_search_and_baseline_stays_within_the_quotas(problem: Problem,
                                                          quotas: Quotas) -> None:
    for search in SEARCHES.values():
        result = search_within(problem, quotas, search)
        assert_within(result, quotas)
        if result.choice is not None:
            assert_satisfies_constraints(problem, result.choice)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(), concurrency=st.integers(2, 120),
       memory=st.one_of(st.just(3008), st.integers(128, 10240)))
def test_exact_stays_within_the_quotas_on_the_full_grid(problem: Problem, concurrency: int,
                                                        memory: int) -> None:
    quotas = Quotas(max_concurrency=concurrency, max_memory_mb=memory)
    result = search_within(problem, quotas, exact)
    assert_within(result, quotas)
    unlimited = exact(problem)
    if result.choice is not None:  # a quota never makes a plan cheaper
        assert unlimited.choice is not None
        assert result.choice.cost_usd >= unlimited.choice.cost_usd * (1 - 1e-12)


@QUOTA_SETTINGS
@given(problem=problems(small=True), quotas=small_quotas)
def test_exact_equals_exhaustive_under_random_quotas(problem: Problem, quotas: Quotas) -> None:
    for pattern in ("kreduce", "scatterreduce", "allreduce"):
        fast = search_within(problem, quotas, partial(exact, pattern=pattern))
        slow = search_within(problem, quotas, partial(exhaustive, pattern=pattern))
        assert same_optimum(fast, slow), (pattern, fast.choice, slow.choice)
        if fast.choice is not None:  # branch and bound walks part of the reference's grid
            assert fast.evaluated <= slow.evaluated
        if fast.choice is None:
            assert fast.violation == slow.violation
            assert (fast.reason or "").split(":")[0] == (slow.reason or "").split(":")[0]


@QUOTA_SETTINGS
@given(problem=problems(small=True), quotas=small_quotas)
def test_a_quota_is_named_exactly_when_raising_it_helps(problem: Problem,
                                                        quotas: Quotas) -> None:
    result = search_within(problem, quotas, exact)
    bounded = quotas.apply(problem)
    if result.choice is not None:
        assert bounded is not None and same_optimum(result, exact(bounded))
        return
    reason = result.reason or ""
    if result.violation not in (Violation.MAX_MEMORY, Violation.MAX_CONCURRENCY):
        assert not exact(problem).feasible  # the quotas are not to blame
        return
    if bounded is not None:
        assert exact(problem).feasible
    if reason.startswith("max-memory:"):
        relaxed = limit_workers(problem, quotas.max_workers)
        assert relaxed is not None and exact(relaxed).feasible
    elif reason.startswith("max-concurrency:") and bounded is not None:
        relaxed = limit_memory(problem, quotas.max_memory_mb)
        assert relaxed is not None and exact(relaxed).feasible


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(problem=problems(small=True), data=st.data())
def test_quotas_just_below_the_optimum_bind_or_change_it(problem: Problem,
                                                         data: st.DataObject) -> None:
    free = exact(problem)
    assume(free.choice is not None)
    assert free.choice is not None
    quotas = Quotas(
        max_concurrency=data.draw(st.integers(2, max(2, 2 * free.choice.workers - 1))),
        max_memory_mb=data.draw(st.integers(128, free.choice.memory_mb)))
    result = search_within(problem, quotas, exact)
    assert_within(result, quotas)
    assert same_optimum(result, search_within(problem, quotas, exhaustive))
    if result.choice is None:  # the unlimited problem is feasible, so a quota must bind
        assert (result.reason or "").split(":")[0] in QUOTA_NAMES
    else:
        assert result.choice.cost_usd >= free.choice.cost_usd * (1 - 1e-12)


def test_quotas_cut_the_grid_without_moving_it() -> None:
    problem = Problem(workload=load_workload("resnet50-cifar10"), platform=load_platform("s3"),
                      prices=load_prices(), epochs=19, deadline_s=8000, max_global_batch=1024)
    bounded = Quotas(max_concurrency=101, max_memory_mb=3008).apply(problem)
    assert bounded is not None
    grid = problem.memory_grid()
    assert np.array_equal(bounded.memory_grid(), grid[grid <= 3008])
    assert bounded.memory_grid().max() == 2944 and bounded.max_workers == 50
    assert Quotas(max_concurrency=5).apply(dataclasses.replace(problem, min_workers=3)) is None
    assert Quotas().provenance() == {"max_concurrency": "1000", "max_memory_mb": "10240"}


# ---- the command line ------------------------------------------------------------------------

BERT = ["--workload", "bert-base-cola", "--deadline", "2500", "--max-global-batch", "640",
        "--epochs", "6"]


def cli(*argv: str) -> tuple[int, dict[str, Any], str]:
    """Run the planner with --json; the exit code, its one JSON object and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"])
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert len(lines) == 1, out.getvalue()
    document = json.loads(lines[0])
    assert isinstance(document, dict)
    return code, document, err.getvalue()


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=st.sampled_from(["bert-base-cola", "resnet50-cifar10", "mobilenet-cifar10",
                                 "squeezenet-cifar10", "cnn-digits", "mlp-digits"]),
       deadline=st.integers(300, 20_000), cap=st.integers(16, 1024), epochs=st.integers(1, 25),
       memory=st.one_of(st.just(3008), st.integers(128, 10240)),
       concurrency=st.one_of(st.just(100), st.integers(2, 200)),
       search=st.sampled_from(["exact", "two-stage"]))
def test_plan_never_exceeds_the_quotas(workload: str, deadline: int, cap: int, epochs: int,
                                       memory: int, concurrency: int, search: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "plan.json"
        code, document, _ = cli(
            "plan", "--workload", workload, "--deadline", str(deadline), "--max-global-batch",
            str(cap), "--epochs", str(epochs), "--max-memory", str(memory), "--max-concurrency",
            str(concurrency), "--search", search, "--out", str(out))
        if code == 3:
            assert document["status"] == "infeasible"
            reason = document["search"]["reason"]  # two-stage may also find no seed at all
            assert reason.split(":")[0] in NAMES or reason.startswith("no ScatterReduce seed")
            return
        assert code == 0
        plan = Plan.load(out)
    assert plan.deployment.memory_mb <= memory and 2 * plan.deployment.workers <= concurrency
    assert plan.quotas is not None and plan.quotas.max_memory_mb == memory
    assert plan.quotas.max_concurrency == concurrency


def test_quotas_change_the_plan_and_go_into_its_quotas_section() -> None:
    code, document, _ = cli("plan", *BERT)
    assert code == 0 and document["plan"]["deployment"]["memory_mb"] > 3008
    assert document["plan"]["quotas"] == {"max_concurrency": 1000, "max_memory_mb": 10240}
    limited = ["--max-global-batch", "1600", "--epochs", "6", "--max-memory", "4000",
               "--optimizer", "sgd",  # AdamW's second vector (+417 MB) misses this deadline
               "--pattern", "kreduce"]  # the paper's: the pipelined one needs fewer workers
    code, document, _ = cli("plan", "--workload", "bert-base-cola", "--deadline", "1500",
                            *limited)
    assert code == 0 and document["plan"]["deployment"]["workers"] > 50
    code, document, _ = cli("plan", "--workload", "bert-base-cola", "--deadline", "1600",
                            *limited, "--max-concurrency", "100")
    deployment = document["plan"]["deployment"]
    assert code == 0 and deployment["workers"] <= 50 and deployment["memory_mb"] <= 4000
    assert document["plan"]["quotas"] == {"max_concurrency": 100, "max_memory_mb": 4000}


@pytest.mark.parametrize(("quotas", "name"), [
    (["--max-memory", "3008"], "max-memory"),
    (["--max-concurrency", "14"], "max-concurrency"),
    (["--max-memory", "3072", "--max-concurrency", "14"], "max-memory and max-concurrency"),
    (["--min-workers", "3", "--max-concurrency", "5"], "max-concurrency"),
    (["--max-memory", "3008", "--search", "two-stage"], "max-memory"),
])
def test_infeasible_because_of_a_quota_exits_3_naming_it(quotas: list[str], name: str) -> None:
    quotas = ["--pattern", "kreduce", *quotas]  # the paper's; the pipelined one fits some
    code, document, _ = cli("plan", *BERT, *quotas)
    assert code == 3 and document["status"] == "infeasible"
    assert document["search"]["reason"].split(":")[0] == name
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["plan", *BERT, *quotas]) == 3
    assert f"infeasible: {name}:" in err.getvalue()


def test_exhaustive_names_the_quota_too() -> None:
    code, document, _ = cli("plan", "--workload", "squeezenet-cifar10", "--deadline", "3000",
                            "--max-global-batch", "384", "--epochs", "20", "--min-workers",
                            "2", "--max-concurrency", "4", "--max-memory", "640",
                            "--search", "exhaustive")
    assert code == 3 and document["search"]["method"] == "exhaustive"
    assert document["search"]["reason"].startswith("max-memory:")


def test_a_quota_is_not_blamed_when_raising_it_would_not_help() -> None:
    # Raising either quota still leaves the deadline out of reach: the deadline is named.
    code, document, _ = cli("plan", "--workload", "bert-base-cola", "--deadline", "60",
                            "--max-global-batch", "640", "--epochs", "6", "--max-memory",
                            "6000", "--max-concurrency", "14")
    assert code == 3 and document["search"]["reason"].startswith("deadline")


@pytest.mark.parametrize(("argv", "argument", "fragment"), [
    (["--max-memory", "127"], "--max-memory", "[128, 10240]"),
    (["--max-memory", "10241"], "--max-memory", "[128, 10240]"),
    (["--max-memory", "3008.5"], "--max-memory", "invalid int"),
    (["--max-memory", "lots"], "--max-memory", "invalid int"),
    (["--max-concurrency", "1"], "--max-concurrency", "[2, 1000000]"),
    (["--max-concurrency", "-4"], "--max-concurrency", "[2, 1000000]"),
    (["--max-concurrency", "1000001"], "--max-concurrency", "[2, 1000000]"),
    (["--max-concurrency", "many"], "--max-concurrency", "invalid int"),
])
@pytest.mark.parametrize("command", ["plan", "compare", "frontier"])
def test_bad_quota_values_exit_2_naming_the_flag(argv: list[str], argument: str, fragment: str,
                                                  command: str) -> None:
    extra = ["--png", "unused.png"] if command == "frontier" else []
    code, document, stderr = cli(command, *BERT, *argv, *extra)
    assert code == 2 and document["status"] == "error"
    assert document["argument"] == argument and fragment in document["message"]
    assert argument in stderr


def test_compare_holds_every_baseline_to_the_quotas() -> None:
    squeezenet = ["--workload", "squeezenet-cifar10", "--deadline", "3000",
                  "--max-global-batch", "384", "--epochs", "20"]
    code, document, _ = cli("compare", *squeezenet, "--max-memory", "3008",
                            "--max-concurrency", "6")
    assert code == 0
    feasible = [r["choice"] for r in document["results"] if r["feasible"]]
    assert len(feasible) == len(document["results"])
    assert all(c["memory_mb"] <= 3008 and c["workers"] <= 3 for c in feasible)
    code, document, _ = cli("compare", *squeezenet, "--max-concurrency", "3")
    assert code == 3 and document["status"] == "infeasible"
    reasons = [r["reason"] for r in document["results"][:6]]
    assert all(reason.startswith("max-concurrency:") for reason in reasons)
    assert document["results"][6]["feasible"]  # standalone needs only 2 executions


def test_frontier_respects_the_quotas(tmp_path: Path) -> None:
    mobilenet = ["--workload", "mobilenet-cifar10", "--deadline", "4000",
                 "--max-global-batch", "512", "--epochs", "21", "--points", "6"]
    _, free, _ = cli("frontier", *mobilenet, "--png", str(tmp_path / "a.png"))
    code, held, _ = cli("frontier", *mobilenet, "--png", str(tmp_path / "b.png"),
                        "--max-memory", "1024", "--max-concurrency", "8")
    assert code == 0
    for pattern, curve in held["curves"].items():
        for cost, unlimited in zip(curve["cost_usd"], free["curves"][pattern]["cost_usd"],
                                   strict=True):
            assert cost is None or (unlimited is not None and cost >= unlimited * (1 - 1e-9))
    code, document, _ = cli("frontier", *mobilenet, "--png", str(tmp_path / "c.png"),
                            "--min-workers", "2", "--max-concurrency", "3")
    assert code == 3 and document["search"]["reason"].startswith("max-concurrency:")
