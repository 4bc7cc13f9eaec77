"""`python -m local run` of a Valkey plan against the states of FasdlCacheStack, as the
trigger's real ``DescribeServerlessCaches`` call sees them (local/aws/cache_plane.py answers with
ElastiCache's XML): the synthesized state machine, real servers, one process per invocation.

The cache has its own stack so that destroying it between runs stops its billing; the trigger
therefore finds its endpoint on every action and hands it to the workers and finalize in the
run state. A destroyed cache stack fails the run before any worker starts, saying how to deploy
it; a cache still being created is waited for (the state machine retries the trigger).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fasdl.contract.errors import CacheMissing, CacheNotReady
from local.aws.template import synthesize
from local.run.run_options import RunOptions
from local.run.run_prep import prepare_dataset, prepare_plan
from tests.local.runs import Run, local_run

EPOCHS = 1  # 22 iterations: one segment
RUN_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("job")
    options = RunOptions(epochs=EPOCHS, channel="valkey", segment_iterations=22)
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
