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

from fasdl.contract.plan import PlanError
from infra.settings import DEFAULT_PLAN_PATH, REPO_ROOT, STUB_TORCH_LAYER, load_settings
from tests.infra.app_process import app_env

ACCOUNT = "123456789012 us-east-1 2026-11-28"


def _plan(tmp_path: Path, memory_mb: int, quotas: dict[str, Any] | None,
          **deployment: Any) -> Path:
    data: dict[str, Any] = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["deployment"].update(memory_mb=memory_mb, **deployment)
    if deployment.get("workers") == 1:
        data["training"]["aggregators"] = 1
    if quotas is not None:
        data["quotas"] = {"max_concurrency": 1000, "max_memory_mb": 10240, **quotas}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def _load(path: Path) -> None:
    load_settings({"plan": str(path), "torch_layer": str(STUB_TORCH_LAYER)}, warn=False)


def test_memory_within_the_recorded_limit_synthesizes(tmp_path: Path) -> None:
    _load(_plan(tmp_path, 3008, {"account_max_memory_mb": 3008, "account": ACCOUNT}))
    _load(_plan(tmp_path, 8576, None))  # no account check recorded: nothing to hold it to
    _load(_plan(tmp_path, 8576, {}))  # quotas without --account: nor here


@pytest.mark.parametrize(("quotas", "field", "bound"), [
    ({"account_max_memory_mb": "3 GB"}, "quotas.account_max_memory_mb", "[128, 10240]"),
    ({"account_max_memory_mb": 64}, "quotas.account_max_memory_mb", "[128, 10240]"),
    ({"max_memory_mb": 20_000}, "quotas.max_memory_mb", "[128, 10240]"),
    ({"max_concurrency": 1}, "quotas.max_concurrency", "[2, 1000000]"),
    ({"account_max_concurrency": 0}, "quotas.account_max_concurrency", "[2, 1000000]"),
    ({"account": ""}, "quotas.account", "1-64 characters"),
    ({"max_memory": 3008}, "quotas.max_memory", "did you mean"),
])
def test_a_bad_recorded_quota_names_the_field_and_range(
        tmp_path: Path, quotas: dict[str, Any], field: str, bound: str) -> None:
    with pytest.raises(PlanError) as raised:
        _load(_plan(tmp_path, 1024, quotas))
    assert raised.value.field == field and bound in str(raised.value)


@pytest.mark.parametrize("key", ["account_max_memory_mb", "max_concurrency"])
def test_a_plan_with_its_quotas_still_in_provenance_is_refused(tmp_path: Path,
                                                                key: str) -> None:
    """Plans written before the quotas section: read as informational, the recorded quota
    would silently become the default, so the plan is refused naming the key and its home."""
    path = _plan(tmp_path, 1024, None)
    data = json.loads(path.read_text())
    data["provenance"][key] = "3008"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError) as raised:
        _load(path)
    assert raised.value.field == f"provenance.{key}"
    assert f"quotas.{key}" in str(raised.value) and "plan again" in str(raised.value)


def test_one_valkey_worker_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as raised:
        _load(_plan(tmp_path, 1024, None, channel="valkey", workers=1))
    assert raised.value.field == "deployment.channel"
    assert "deployment.workers = 1" in str(raised.value) and "'s3'" in str(raised.value)


def _adaptive(tmp_path: Path, policy: str, ceiling: int, concurrency: int | None) -> Path:
    data: dict[str, Any] = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["training"]["adaptive"] = policy
    data["deployment"]["workers_max"] = ceiling
    if concurrency is not None:
        data["quotas"] = {"max_concurrency": concurrency, "max_memory_mb": 10240}
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(data))
    return path


def test_an_adaptive_runs_ceiling_must_fit_the_concurrency_and_the_policy(
        tmp_path: Path) -> None:
    """deployment.workers_max: 2 executions per worker within the plan's concurrency, and only
    beside a policy; an adaptive plan needs the profiles it was made with beside it."""
    workers = json.loads(DEFAULT_PLAN_PATH.read_text())["deployment"]["workers"]
    with pytest.raises(PlanError, match=r"2·60 = 120 concurrent executions exceed the plan's "
                                        r"concurrency quota 100.*allowed range is "
                                        rf"\[{workers}, 50\]") as raised:
        _load(_adaptive(tmp_path, "deadline", 60, 100))
    assert raised.value.field == "deployment.workers_max"
    with pytest.raises(PlanError, match=r"training\.adaptive is 'off'") as raised:
        _load(_adaptive(tmp_path, "off", 2 * workers, None))
    assert raised.value.field == "deployment.workers_max"
    with pytest.raises(PlanError, match=r"expected in .*adaptive\.profiles\.json .*--out"
                       ) as raised:
        _load(_adaptive(tmp_path, "cost", 2 * workers, None))
    assert raised.value.field == "training.adaptive"
    (tmp_path / "adaptive.profiles.json").write_text("{}")  # the synth only ships it
    settings = load_settings({"plan": str(_adaptive(tmp_path, "cost", 2 * workers, None)),
                              "torch_layer": str(STUB_TORCH_LAYER)}, warn=False)
    assert settings.plan.deployment.ceiling == 2 * workers


def test_cdk_app_refuses_memory_above_the_account_limit(tmp_path: Path) -> None:
    """app.py (what ``cdk synth`` runs): one line naming the field and both numbers, exit 2,
    nothing staged."""
    path = _plan(tmp_path, 4736, {"account_max_memory_mb": 3008, "account": ACCOUNT})
    out = tmp_path / "cdk.out"
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "app.py")], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=180, check=False,
        env=app_env(CDK_CONTEXT_JSON=json.dumps({"plan": str(path)}), CDK_OUTDIR=str(out)))
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("fasdl: invalid synth input: plan field 'deployment.memory_mb'")
    for text in ("4736 MB", "3008 MB", "quotas.account_max_memory_mb", ACCOUNT, "--account"):
        assert text in line, text
    assert not out.exists() or not any(out.iterdir())
