"""The re-plan function (replan/handler.py) as Lambda runs it: its own process, the results
bucket on SeaweedFS, the profiles from a file, and neither torch nor scipy importable (its
code ships without them, infra/replan.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fasdl.contract.settings import Settings
from fasdl.contract.training import MEASURED_ON_ENV, PROFILES_ENV
from local.servers.managed import SeaweedS3Server
from planner.adapt.profiles_file import profiles_json
from tests.integration.test_run_records import records, seeded_run  # noqa: F401 (fixture)
from tests.planner.test_boundary import segment_s
from tests.planner.test_run_step import ADAPTIVE_PLAN, CONTEXT, run_state

REPO = Path(__file__).resolve().parents[2]
# Lambda's process: torch and scipy are not there to import
RUN_HANDLER = """
import importlib.abc, json, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "scipy", "matplotlib"):
            raise ImportError(f"{name} is not in the re-plan function's code")
sys.meta_path.insert(0, Absent())
from tests.lambda_context import FakeLambdaContext
from replan.handler import handler
print(json.dumps(handler(json.load(sys.stdin), FakeLambdaContext(memory_mb=1769))))
"""


def invoke(event: dict[str, Any], server: SeaweedS3Server, settings: Settings,
           profiles: Path) -> dict[str, Any]:
    env = {**os.environ,
           **Settings.to_env(results_bucket=settings.results_bucket,
                             datasets_bucket=settings.datasets_bucket,
                             exchange_bucket=settings.exchange_bucket, channel="s3",
                             stack="test", deployment="test", s3_path_style=True),
           "AWS_ENDPOINT_URL_S3": server.endpoint_url, "AWS_ACCESS_KEY_ID": server.access_key,
           "AWS_SECRET_ACCESS_KEY": server.secret_key, "AWS_DEFAULT_REGION": server.region,
           PROFILES_ENV: str(profiles), MEASURED_ON_ENV: "local-emulation",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "functions")])}
    done = subprocess.run([sys.executable, "-c", RUN_HANDLER], input=json.dumps(event),
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_handler_decides_once_and_counts_its_own_invocation(
        records: tuple[Any, Settings, Any, str],  # noqa: F811 (the fixture)
        seaweed_server: SeaweedS3Server, tmp_path: Path) -> None:
    _, settings, client, run_id = records
    plan_key = seeded_run(client, settings, run_id, 2)
    profiles = tmp_path / "plan.profiles.json"
    profiles.write_text(profiles_json(*CONTEXT.profiles))
    length = ADAPTIVE_PLAN.training.segment_iterations
    state = {**run_state(2, 2 * length, 2 * segment_s(2.0)), "run_id": run_id,
             "plan_key": plan_key}
    state["usage"]["started_at"] = time.time() - 2 * segment_s(2.0)  # the handler's clock
    after = invoke({"run": state}, seaweed_server, settings, profiles)
    record_key = settings.results_key(f"{run_id}/adaptations/00002.json")
    body = client.get_object(Bucket=settings.results_bucket, Key=record_key)["Body"].read()
    record = json.loads(body)
    # a slow run's decision, recorded once; the segment cut at the epoch's start it applies at
    assert record["action"] == "change"
    assert after["adaptive"]["pending"] == record_key
    assert after["usage"]["trigger_requests"] == state["usage"]["trigger_requests"] + 1
    assert after["usage"]["trigger_gb_s"] > state["usage"]["trigger_gb_s"]
    # a retried invocation reads the record and returns the same run state
    again = invoke({"run": state}, seaweed_server, settings, profiles)
    assert {**again, "usage": None} == {**after, "usage": None}
    # a finished run passes through untouched
    finished = {**state, "done": True}
    assert invoke({"run": finished}, seaweed_server, settings, profiles) == finished


def test_unreadable_profiles_fail_naming_the_file(
        records: tuple[Any, Settings, Any, str],  # noqa: F811 (the fixture)
        seaweed_server: SeaweedS3Server, tmp_path: Path) -> None:
    _, settings, client, run_id = records
    plan_key = seeded_run(client, settings, run_id, 1)
    broken = tmp_path / "plan.profiles.json"
    broken.write_text(json.dumps({"workload": {}, "platform": 3}))
    state = {**run_state(1, ADAPTIVE_PLAN.training.segment_iterations, segment_s(2.0)),
             "run_id": run_id, "plan_key": plan_key}
    with pytest.raises(AssertionError, match="missing or not an object: platform, prices"):
        invoke({"run": state}, seaweed_server, settings, broken)
