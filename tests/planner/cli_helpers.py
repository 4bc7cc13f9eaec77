"""Calling the planner CLI in-process: its --json answer (one object) or its plain output, a
workload file with changed fields, the small plan flags and the check of a refusal
(test_cli_inputs.py, test_cli_bad_inputs.py, test_plan_limits.py, test_recipe.py,
test_lr_scaling.py)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from planner.commands.cli import main

SMALL = ["--deadline", "3000", "--max-global-batch", "64", "--epochs", "2"]
TEXT = ["--workload", "bert-mini-textset", "--deadline", "900", "--max-global-batch", "64",
        "--epochs", "3"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    """``planner ARGV --json``: exit code, its one JSON object, stderr."""
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.strip()]
    assert len(lines) == 1, captured.out
    return code, json.loads(lines[0]), captured.err


def cli(*argv: str) -> tuple[int, str, str]:
    """``planner ARGV``: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def workload_file(tmp_path: Path, **changes: Any) -> str:
    data = json.loads((Path(__file__).parents[2] / "planner" / "data" / "workloads"
                       / "squeezenet-cifar10.json").read_text())
    data.update(changes)
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(data))
    return str(path)


def assert_bad(code: int, document: dict[str, Any], stderr: str, argument: str,
               *fragments: str) -> None:
    """Exit 2, an error naming ``argument`` with every fragment, and no traceback."""
    assert (code, document["status"], document["argument"]) == (2, "error", argument), document
    for fragment in fragments:
        assert fragment in document["message"], document["message"]
    assert "Traceback" not in stderr
