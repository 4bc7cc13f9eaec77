"""A workload profiled at some memories is planned within them unless --extrapolate-memory:
beyond them its time and memory fits are extrapolated (issue 43)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.commands.cli import main
from planner.model.inputs.profiles import load_workload

PLAN = ["--deadline", "3600", "--max-global-batch", "256", "--epochs", "10", "--channel",
        "s3", "--json"]


def _profiled(tmp_path: Path, memories: list[float]) -> str:
    """cnn-digits (planned at 512 MB unrestricted) as if profiled at ``memories``."""
    data = load_workload("cnn-digits").to_dict()
    path = tmp_path / "profiled.json"
    path.write_text(json.dumps({**data, "profiled_memory_mb": memories}))
    return str(path)


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    code = main(["plan", *argv, *PLAN])
    return code, json.loads(capsys.readouterr().out or "{}")


def test_the_plan_stays_within_the_profiled_memories(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = _profiled(tmp_path, [884.0, 1769.0])
    code, document = _plan(capsys, "--workload", workload)
    assert code == 0
    memory = document["plan"]["deployment"]["memory_mb"]  # type: ignore[index]
    assert 896 <= memory <= 1664, memory  # the 128 MB grid within 884-1769
    assert document["confidence"]["extrapolated"] == []  # type: ignore[index]
    code, document = _plan(capsys, "--workload", workload, "--extrapolate-memory")
    assert code == 0
    assert document["plan"]["deployment"]["memory_mb"] == 512  # type: ignore[index]
    assert "workload.compute" in document["confidence"]["extrapolated"]  # type: ignore[index]


def test_a_range_without_a_grid_memory_names_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code = main(["plan", "--workload", _profiled(tmp_path, [900.0, 1000.0]), *PLAN])
    document = json.loads(capsys.readouterr().out)
    assert code == 2 and document["argument"] == "--workload"
    assert "900-1000 MB" in document["message"]
    assert "--extrapolate-memory" in document["message"]


def test_an_infeasible_plan_within_the_range_says_how_to_search_beyond(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 128-256 MB: no memory there holds the cnn's process (c is above 256 MB)
    code, document = _plan(capsys, "--workload", _profiled(tmp_path, [128.0, 256.0]))
    assert code == 3 and document["status"] == "infeasible"
    assert document["hint"] == ("memory searched within the profiled 128-256 MB; "
                                "--extrapolate-memory searches beyond")
