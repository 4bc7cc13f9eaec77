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
# or more, measured at 2fc0413 on 2026-11-29; a stale figure only changes the order.
MEASURED = {
    "local/run/test_run_faults.py": 689,
    "local/run/test_run_e2e.py": 255,
    "local/faults/test_chaos.py": 238,
    "local/run/test_run_text.py": 176,
    "integration/test_leftovers.py": 175,
    "local/run/test_run_quotas.py": 164,
    "local/run/test_run_out_of_memory.py": 126,
    "integration/test_workers.py": 119,
    "local/run/test_own_model_e2e.py": 117,
    "bench/test_bench_smoke_runs.py": 116,
    "local/run/test_run_cache_stack.py": 96,
    "bench/test_memory_roles.py": 89,
    "local/run/test_run_emulated.py": 84,
    "bench/test_bench_smoke.py": 75,
    "planner/test_quotas.py": 74,
    "planner/test_search.py": 60,
    "runtime/test_checkpoint_networks.py": 60,
    "local/run/test_run_guards.py": 56,
    "planner/test_calibrate.py": 53,
    "integration/test_readme_commands.py": 48,
    "runtime/test_evaluate.py": 44,
    "planner/test_pipelined.py": 42,
    "integration/test_channels.py": 36,
    "runtime/test_fencing.py": 35,
    "local/faults/test_lambda_faults_service.py": 34,
    "layer/test_torch_layer.py": 32,
    "bench/test_orchestration.py": 30,
    "runtime/test_text_networks.py": 30,
    "layer/test_lambda_scan.py": 27,
    "planner/test_cli.py": 25,
    "local/aws/test_adapter.py": 23,
    "bench/test_convergence.py": 23,
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
