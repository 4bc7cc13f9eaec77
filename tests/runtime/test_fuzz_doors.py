"""Property-based fuzzing of the console-input and dataset-archive doors (issue 15): a mutated
input ends in the door's one error type naming a field (or one ``fasdl.datasets:`` line and
exit 2), or is accepted and valid; it never raises anything else, never half-writes.

Small and derandomized here; ``make bench`` runs the same cases with a larger budget
(bench/fuzz_inputs.py). The plan, workload, platform and flag doors are in
tests/planner/test_fuzz_inputs.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from bench.fuzz_runtime_doors import runtime_door_cases

DOORS = runtime_door_cases()


@pytest.mark.parametrize("door", sorted(DOORS))
def test_door_gives_a_clean_error_or_a_valid_result(door: str) -> None:
    strategy, check = DOORS[door]

    @settings(max_examples=60, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(strategy)
    def run(value: Any) -> None:
        check(value)

    run()
