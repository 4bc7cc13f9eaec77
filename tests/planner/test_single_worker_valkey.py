"""A Valkey plan of one worker would deploy a VPC and a cache for no exchange (the synth refuses
it): the planner plans that worker on S3 and says so, or refuses when it cannot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.commands.cli import main

VALKEY_PROFILE = Path(__file__).resolve().parents[2] / "planner" / "data" / "platforms" / (
    "aws-lambda-x86_64-valkey.json")

SMALL = ["plan", "--workload", "cnn-digits", "--deadline", "600", "--max-global-batch", "512",
         "--epochs", "2", "--channel", "valkey", "--json"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main([*SMALL, *argv])
    return code, json.loads(capsys.readouterr().out)


def test_one_valkey_worker_is_planned_on_s3(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = _run(capsys)
    assert code == 0
    deployment = document["plan"]["deployment"]
    assert (deployment["channel"], deployment["workers"]) == ("s3", 1)
    assert document["plan"]["provenance"]["platform_profile"].endswith("-s3")
    (warning,) = [w for w in document["warnings"] if "W = 1" in w]
    assert "planned on S3 instead" in warning and "--min-workers 2" in warning
    # asked for workers that exchange, the plan stays on Valkey
    code, document = _run(capsys, "--min-workers", "2")
    assert code == 0 and document["plan"]["deployment"]["channel"] == "valkey"
    assert document["plan"]["deployment"]["workers"] >= 2


def test_a_valkey_profile_of_ones_own_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = _run(capsys, "--platform", str(VALKEY_PROFILE))
    assert code == 2 and document["argument"] == "--channel"
    assert "W = 1" in document["message"] and "--min-workers 2" in document["message"]
