"""fasdl/run/run_records.py against SeaweedFS: an adaptive run's records created once with
S3's conditional write, a segment's role times from its kept attempt, and the re-plan step
(planner/adapt/run_step.py) deciding once over them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from fasdl.contract.settings import Settings
from fasdl.run.run_records import RunRecords
from local.servers.managed import SeaweedS3Server
from planner.adapt.online_calibration import SegmentRoles
from planner.adapt.run_step import StepContext, replan_step
from tests.planner.test_boundary import measured, segment_s
from tests.planner.test_run_step import ADAPTIVE_PLAN, CONTEXT, NOW, run_state

M = ADAPTIVE_PLAN.deployment.memory_mb


@pytest.fixture
def records(seaweed_server: SeaweedS3Server) -> tuple[RunRecords, Settings, Any, str]:
    bucket = seaweed_server.buckets[0]
    settings = Settings(stack="test", channel="s3", deployment="test", datasets_bucket=bucket,
                        results_bucket=bucket, exchange_bucket=bucket)
    client = seaweed_server.client()
    return RunRecords(client, settings), settings, client, f"adapt-{uuid.uuid4().hex[:8]}"


def write_results(client: Any, settings: Settings, run_id: str, segment: SegmentRoles, *,
                  attempt: int = 0, workers: tuple[int, ...] = (0,)) -> None:
    """Worker results that fasdl.run.role_times reads back as ``segment``'s figures."""
    for worker in workers:
        role = "aggregator" if worker < ADAPTIVE_PLAN.training.aggregators else "non_aggregator"
        figures = segment.roles[role]
        n = int(figures["iterations"])
        total = n * (figures["compute_s_per_iteration"] + figures["exchange_s_per_iteration"])
        body = {"worker": worker, "role": role, "iterations_done": n,
                "batch": ADAPTIVE_PLAN.batch_of(worker),
                "time": {"compute_s": n * figures["compute_s_per_iteration"],
                         "upload_s": n * figures["exchange_s_per_iteration"], "total_s": total},
                "invocation": {"memory_mb": M, "billed_ms": round(
                    1000 * (total + figures["cold_start_s"]))}}
        key = settings.segment_result_key(run_id, segment.index, attempt, worker)
        client.put_object(Bucket=settings.results_bucket, Key=key,
                          Body=json.dumps(body).encode())


def seeded_run(client: Any, settings: Settings, run_id: str, segments: int) -> str:
    """The adaptive plan and ``segments`` slow segments' results in the bucket; the plan key."""
    plan_key = settings.plan_key(run_id)
    client.put_object(Bucket=settings.results_bucket, Key=plan_key,
                      Body=ADAPTIVE_PLAN.to_json().encode())
    for index in range(segments):
        write_results(client, settings, run_id, measured(index, compute=2.0))
    return plan_key


def test_a_record_is_created_once_and_read_back(records: tuple[RunRecords, Settings, Any,
                                                                str]) -> None:
    store, settings, _, run_id = records
    key = settings.results_key(f"{run_id}/adaptations/00002.json")
    assert store.read(key) is None
    assert store.create(key, b'{"first": 1}')
    assert not store.create(key, b'{"second": 2}')  # the conditional write refuses it
    assert store.read(key) == b'{"first": 1}'


def test_a_segments_role_times_come_from_its_kept_attempt(
        records: tuple[RunRecords, Settings, Any, str]) -> None:
    store, settings, client, run_id = records
    assert store.segment_roles(run_id, 3) is None
    write_results(client, settings, run_id, measured(3, compute=5.0), attempt=0)
    write_results(client, settings, run_id, measured(3, compute=2.0), attempt=1)
    roles = store.segment_roles(run_id, 3)
    assert roles is not None
    expected = measured(3, compute=2.0).roles["aggregator"]
    assert roles["aggregator"]["compute_s_per_iteration"] == pytest.approx(
        expected["compute_s_per_iteration"], rel=1e-5)
    assert roles["aggregator"]["iterations"] == expected["iterations"]


def test_the_re_plan_step_decides_once_over_the_bucket(
        records: tuple[RunRecords, Settings, Any, str]) -> None:
    """A slow run's step over SeaweedFS: the decision written once under the runs prefix; a
    second step (a retried invocation) returns the same run state from it."""
    store, settings, client, run_id = records
    plan_key = seeded_run(client, settings, run_id, 2)
    length = ADAPTIVE_PLAN.training.segment_iterations
    state = {**run_state(2, 2 * length, 2 * segment_s(2.0)), "run_id": run_id,
             "plan_key": plan_key}
    context = StepContext(settings.runs_prefix, CONTEXT.profiles, NOW, CONTEXT.measured_on)
    after = replan_step(state, store, context)
    record_key = settings.results_key(f"{run_id}/adaptations/00002.json")
    record = json.loads(store.read(record_key) or b"null")
    assert record["action"] == "change" and after["adaptive"]["pending"] == record_key
    assert replan_step(state, store, context) == after
