"""cfn-lint on the synthesized templates and statelint on the state machine definitions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.infra.conftest import Synth, state_machine_definition

BIN = Path(sys.executable).parent
# W3005: CDK adds DependsOn on a function's role and policy next to the GetAtt of the role;
# redundant but harmless, and not ours to change.
CFN_LINT_IGNORE = ["W3005"]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_cfn_lint(synths: dict[str, Synth], tmp_path: Path) -> None:
    paths = []
    for name, synth in synths.items():
        path = tmp_path / f"{name}.template.json"
        path.write_text(json.dumps(synth.json))
        paths.append(str(path))
    result = _run([str(BIN / "cfn-lint"), "--ignore-checks", *CFN_LINT_IGNORE, "--", *paths])
    assert result.returncode == 0, result.stdout + result.stderr


def test_statelint(synths: dict[str, Synth], tmp_path: Path) -> None:
    paths = []
    for name, synth in synths.items():
        path = tmp_path / f"{name}.asl.json"
        path.write_text(json.dumps(state_machine_definition(synth)))
        paths.append(str(path))
    # CDK writes BackoffRate as an integer, which statelint would flag as "not a float".
    result = _run([str(BIN / "statelint"), "--ignore=FLOAT", *paths])
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
