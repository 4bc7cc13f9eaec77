"""Every synthesized state machine passes ``asl-validator`` (npm, pinned in package.json) and
uses only forms AWS documents, at W = 4 (inline and Distributed), 8, 64 and 1,000.

Only moto's interpreter runs our definitions locally, and it accepts more than AWS documents.
AWS documents an intrinsic's arguments as plain paths
(https://docs.aws.amazon.com/step-functions/latest/dg/intrinsic-functions.html); asl-validator
4.0.0 accepts ``States.ArrayContains($[*].status, ...)`` too, so that is checked here.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.settings import REPO_ROOT
from tests.infra.conftest import PLAN_FILES, Synth, state_machine_definition, synthesize

ASL_VALIDATOR = REPO_ROOT / "node_modules" / ".bin" / "asl-validator"
MACHINES = ("Workflow", "Profiling")  # construct ids of the training and profiling machines


@pytest.fixture(scope="module")
def thousand_workers(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The W = 64 plan widened to W = 1,000 (a 2,000-execution concurrency quota's worth)."""
    plan = json.loads(PLAN_FILES["wide_s3"].read_text())
    plan["deployment"]["workers"] = 1000
    plan["training"]["max_global_batch"] = 16 * 1000
    path = tmp_path_factory.mktemp("plans") / "wide_1000.json"
    path.write_text(json.dumps(plan))
    return synthesize("wide_1000", path)


@pytest.fixture(scope="module")
def all_synths(synths: dict[str, Synth], small_distributed: Synth,
               thousand_workers: Synth) -> list[Synth]:
    found = [*synths.values(), small_distributed, thousand_workers]
    assert sorted(s.settings.plan.deployment.workers for s in found) == [4, 4, 8, 64, 1000]
    return found


def definitions(synth: Synth) -> dict[str, dict[str, Any]]:
    names = [logical for logical in synth.resources("AWS::StepFunctions::StateMachine")]
    return {construct: state_machine_definition(synth, construct) for construct in MACHINES
            if any(name.startswith(construct) for name in names)}


def _strings(node: object) -> Iterator[tuple[str, str]]:
    """Every ``"key.$": value`` of a definition, nested states included."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.endswith(".$") and isinstance(value, str):
                yield key, value
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def intrinsics(definition: dict[str, Any]) -> list[str]:
    return [value for _, value in _strings(definition) if value.startswith("States.")]


def test_every_definition_passes_asl_validator(all_synths: list[Synth],
                                               tmp_path: Path) -> None:
    assert ASL_VALIDATOR.exists(), "asl-validator missing: run make setup (npm ci)"
    paths = []
    for synth in all_synths:
        for construct, definition in definitions(synth).items():
            path = tmp_path / f"{synth.name}-{construct}.json"
            path.write_text(json.dumps(definition))
            paths.append(path)
    assert len(paths) == 7  # 5 training machines, 2 profiling machines
    args = [arg for path in paths for arg in ("--json-path", str(path))]
    done = subprocess.run([str(ASL_VALIDATOR), *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("is valid") == len(paths), done.stdout


def test_asl_validator_rejects_a_broken_definition(tmp_path: Path) -> None:
    """The check above can fail: a dangling Next is an error."""
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"StartAt": "A", "States": {"A": {"Type": "Pass",
                                                                   "Next": "B"}}}))
    done = subprocess.run([str(ASL_VALIDATOR), "--json-path", str(broken)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "MISSING_TRANSITION_TARGET" in done.stdout + done.stderr


def test_intrinsic_arguments_are_plain_paths(all_synths: list[Synth]) -> None:
    found = 0
    for synth in all_synths:
        for construct, definition in definitions(synth).items():
            for value in intrinsics(definition):
                found += 1
                assert "[*]" not in value and "[?" not in value, (synth.name, construct, value)
    # Count segment's MathAdd in 5 machines, 4 kinds' Causes in the 3 Distributed ones and
    # the profiling machines' JsonMerge: the scan saw them all
    assert found == 5 + 3 * 4 + 2


def test_the_intrinsic_scan_sees_nested_states() -> None:
    definition = {"States": {"Map": {"ItemProcessor": {"States": {"P": {"Parameters": {
        "x.$": "States.ArrayContains($[*].status, 'ok')"}}}}}}}
    assert intrinsics(definition) == ["States.ArrayContains($[*].status, 'ok')"]
