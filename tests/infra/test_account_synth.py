"""The synth refuses what the account cannot deploy, or what deploys for nothing: a plan above
the function-memory limit ``planner plan --account`` recorded, and a Valkey plan of one worker
(a VPC and a cache, no exchange)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fasdl.contract.lambda_quotas import ACCOUNT_KEY, ACCOUNT_MEMORY_KEY
from fasdl.contract.plan import PlanError
from infra.settings import DEFAULT_PLAN_PATH, REPO_ROOT, STUB_TORCH_LAYER, load_settings
from tests.infra.app_process import app_env

ACCOUNT = "123456789012 us-east-1 2026-11-28"


def _plan(tmp_path: Path, memory_mb: int, provenance: dict[str, str],
          **deployment: Any) -> Path:
    data: dict[str, Any] = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["deployment"].update(memory_mb=memory_mb, **deployment)
    if deployment.get("workers") == 1:
        data["training"]["aggregators"] = 1
    data["provenance"] = {**data.get("provenance", {}), **provenance}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def _load(path: Path) -> None:
    load_settings({"plan": str(path), "torch_layer": str(STUB_TORCH_LAYER)}, warn=False)


def test_memory_within_the_recorded_limit_synthesizes(tmp_path: Path) -> None:
    _load(_plan(tmp_path, 3008, {ACCOUNT_MEMORY_KEY: "3008", ACCOUNT_KEY: ACCOUNT}))
    _load(_plan(tmp_path, 8576, {}))  # no account check recorded: nothing to hold it to


def test_a_bad_recorded_limit_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as raised:
        _load(_plan(tmp_path, 1024, {ACCOUNT_MEMORY_KEY: "3 GB"}))
    assert raised.value.field == f"provenance.{ACCOUNT_MEMORY_KEY}"


def test_one_valkey_worker_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as raised:
        _load(_plan(tmp_path, 1024, {}, channel="valkey", workers=1))
    assert raised.value.field == "deployment.channel"
    assert "deployment.workers = 1" in str(raised.value) and "'s3'" in str(raised.value)


def test_cdk_app_refuses_memory_above_the_account_limit(tmp_path: Path) -> None:
    """app.py (what ``cdk synth`` runs): one line naming the field and both numbers, exit 2,
    nothing staged."""
    path = _plan(tmp_path, 4736, {ACCOUNT_MEMORY_KEY: "3008", ACCOUNT_KEY: ACCOUNT})
    out = tmp_path / "cdk.out"
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "app.py")], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=180, check=False,
        env=app_env(CDK_CONTEXT_JSON=json.dumps({"plan": str(path)}), CDK_OUTDIR=str(out)))
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("fasdl: invalid synth input: plan field 'deployment.memory_mb'")
    for text in ("4736 MB", "3008 MB", ACCOUNT_MEMORY_KEY, ACCOUNT, "--account"):
        assert text in line, text
    assert not out.exists() or not any(out.iterdir())
