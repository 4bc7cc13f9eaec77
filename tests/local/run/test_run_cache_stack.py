"""`python -m local run` of a Valkey plan against the states of FasdlCacheStack, as the
trigger's real ``DescribeServerlessCaches`` call sees them (local/aws/cache_plane.py answers with
ElastiCache's XML): the synthesized state machine, real servers, one process per invocation.

The cache has its own stack so that destroying it between runs stops its billing; the trigger
therefore finds its endpoint on every action and hands it to the workers and finalize in the
run state. A destroyed cache stack fails the run before any worker starts, saying how to deploy
it; a cache still being created is waited for (the state machine retries the trigger), and
so is a cache younger than a plan's wait for its pre-scaled minimum.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasdl.contract.errors import CacheMissing, CacheNotReady, CacheWarming
from fasdl.contract.prediction import RAMP_FIELDS
from local.aws.template import synthesize
from local.run.run_options import RunOptions
from local.run.run_prep import prepare_dataset, prepare_plan
from tests.local.runs import Run, local_run

EPOCHS = 1  # 22 iterations: one segment
RUN_TIMEOUT_S = 180
WAIT_S = 3_600.0  # AWS: a pre-scaled minimum is in force within 60 minutes


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("job")
    options = RunOptions(epochs=EPOCHS, channel="valkey", segment_iterations=22,
                         adaptive="off")
    plan = prepare_plan(options, work, lambda text: None)
    plan, _ = prepare_dataset(plan, options, work, lambda text: None)
    plan.save(work / "plan.json")
    cdk_out = synthesize(work / "plan.json", work / "cdk.out").parent
    # a Valkey plan synthesizes the cache in a stack of its own
    assert sorted(path.name for path in cdk_out.glob("*.template.json")) == [
        "FasdlCacheStack.template.json", "FasdlStack.template.json"]
    return work / "plan.json", cdk_out


def run(job: tuple[Path, Path], directory: Path, run_id: str, *args: str) -> Run:
    plan, cdk_out = job
    return local_run(plan, cdk_out, directory / run_id, run_id, *args, timeout_s=RUN_TIMEOUT_S)


def workers_invoked(result: Run) -> int:
    return sum(1 for i in result.report["invocations"] if i.get("worker") is not None)


@pytest.mark.slow
def test_destroyed_cache_stack_fails_before_any_worker(
        job: tuple[Path, Path], tmp_path: Path) -> None:
    result = run(job, tmp_path, "no-cache", "--cache-stack", "absent")
    assert result.code == 1, result.output[-3000:]
    assert result.report["status"] == "FAILED"
    failure = result.report["failure"]
    assert failure is not None and failure["error"] == CacheMissing.__name__
    assert "does not exist; deploy it with `npx cdk deploy FasdlCacheStack" in failure["cause"]
    assert workers_invoked(result) == 0


@pytest.mark.slow
def test_cache_being_created_is_waited_for(job: tuple[Path, Path], tmp_path: Path) -> None:
    """The first lookup sees 'creating': the state machine retries the trigger 30 s later,
    then the run trains through the endpoint the lookup returned."""
    result = run(job, tmp_path, "creating", "--cache-stack", "creating:1")
    assert result.code == 0, result.output[-3000:]
    triggers = [i for i in result.report["invocations"] if i.get("worker") is None
                and i.get("error") == CacheNotReady.__name__]
    assert len(triggers) == 1, result.report["invocations"]
    assert workers_invoked(result) == result.report["workers"]
    assert result.report["exchange_left"] == 0  # finalize reached the cache to clean it


@pytest.fixture(scope="module")
def waiting_job(job: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[Path, Path]:
    """The job's plan as the planner writes one that waits for its cache's pre-scaled
    minimum instead of ramping (planner/model/terms/cost_model.py): cache_wait_s, no ramp."""
    work = tmp_path_factory.mktemp("waiting-job")
    data = json.loads(job[0].read_text())
    breakdown = data["prediction"]["breakdown"]
    for name in ("cache_ramp_s", *RAMP_FIELDS):
        breakdown.pop(name, None)
    breakdown["cache_wait_s"] = WAIT_S
    (work / "plan.json").write_text(json.dumps(data))
    return work / "plan.json", synthesize(work / "plan.json", work / "cdk.out").parent


@pytest.mark.slow
def test_a_plan_that_waits_holds_its_first_segment_until_the_cache_is_old_enough(
        waiting_job: tuple[Path, Path], tmp_path: Path) -> None:
    """A cache deployed WAIT_S − 5 s before the run's first lookup: the trigger's first start
    raises CacheWarming (the state machine asks again 30 s later, no jitter), the second starts;
    the summary says the run waited, from the execution's start, and its clock counts it."""
    result = run(waiting_job, tmp_path, "waits", "--cache-stack", f"age:{WAIT_S - 5:g}")
    assert result.code == 0, result.output[-3000:]
    warming = [i for i in result.report["invocations"] if i.get("worker") is None
               and i.get("error") == CacheWarming.__name__]
    assert len(warming) == 1, result.report["invocations"]
    assert workers_invoked(result) == result.report["workers"]
    measured = result.report["summary"]["measured"]
    start = measured["cache_start"]
    assert start["mode"] == "wait" and start["planned_wait_s"] == WAIT_S
    assert 25.0 <= start["waited_s"] <= 90.0  # one 30 s retry, on a loaded machine
    assert measured["measured_s"] >= start["waited_s"]
