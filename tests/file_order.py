"""The parallel pass's order: the costliest test files first (a pytest plugin that
tests/conftest.py loads).

xdist's ``--dist loadfile`` deals whole files to its two workers in collection order, and by
default reorders them by test count, which puts the end-to-end files (few tests, minutes each)
last: the pass then ends with one worker running a long file while the other waits. With
``--no-loadscope-reorder`` (pyproject.toml) this order holds instead: files by their estimated
cost, largest first, then the cheap files fill the gaps (longest-processing-time-first). The
estimate is a file's measured seconds where :data:`MEASURED` has them, else the sum of its
tests' cost marks (tests/costs.py); within a file the order stays as written.
"""

from __future__ import annotations

import pytest

from tests import costs

# Rough seconds per test of each mark on this 2-core machine (the parallel pass's durations):
# a test counts its costliest mark. Only the order matters, never a result.
SECONDS = {costs.E2E: 60.0, costs.SANDBOX: 4.0, costs.SERVERS: 2.0, costs.NETWORK: 2.0,
           costs.SYNTH: 1.0}
CHEAP_SECONDS = 0.05
# Seconds per file in the parallel pass (pytest --junitxml, summed per file), the files of 20 s
# or more, measured at b1713ee on 2026-11-29 (quiet machine; the runs folded since, less
# their run); a stale figure only changes the order.
MEASURED = {
    "local/run/test_run_faults.py": 305,  # + the budget stop and its resume (~37 s)
    "local/faults/test_chaos.py": 215,
    "local/run/test_run_e2e.py": 129,
    "local/run/test_own_model_e2e.py": 180,  # + the tabular journey after the images one
    "integration/test_workers.py": 113,
    "local/run/test_run_out_of_memory.py": 110,
    "integration/test_leftovers.py": 107,
    "bench/test_bench_smoke_runs.py": 150,  # + bench.cache_scaling (~45 s, not yet in a pass)
    "local/run/test_run_cache_stack.py": 135,  # + a plan that waits for its cache (~58 s)
    "local/run/test_run_text.py": 56,
    "local/run/test_run_quotas.py": 56,
    "bench/test_bench_smoke.py": 56,
    "bench/test_memory_roles.py": 54,
    "planner/test_search.py": 51,
    "planner/test_quotas.py": 50,
    "runtime/test_checkpoint_networks.py": 41,
    "local/run/test_run_emulated.py": 36,
    "planner/test_pipelined.py": 33,
    "local/faults/test_lambda_faults_service.py": 30,
    "bench/test_orchestration.py": 28,
    "layer/test_torch_layer.py": 28,
    "infra/test_app.py": 24,
    "integration/test_channels.py": 23,
    "runtime/test_fencing.py": 22,
    "planner/test_cli.py": 22,
    "local/aws/test_adapter.py": 21,
    "bench/test_convergence.py": 20,
}


def estimated_seconds(item: pytest.Item) -> float:
    return max((seconds for mark, seconds in SECONDS.items()
                if item.get_closest_marker(mark) is not None), default=CHEAP_SECONDS)


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)  # after tests/cost_marks.py has marked every test
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    estimated: dict[str, float] = {}
    first_seen: dict[str, int] = {}  # pytest may interleave files (higher-scoped params)
    for index, item in enumerate(items):
        path = _file_of(item)
        estimated[path] = estimated.get(path, 0.0) + estimated_seconds(item)
        first_seen.setdefault(path, index)
    cost = {path: MEASURED.get(path.removeprefix("tests/"), seconds)
            for path, seconds in estimated.items()}
    items.sort(key=lambda item: (-cost[_file_of(item)], first_seen[_file_of(item)]))
