"""`python -m local run` at a memory size too small for the worker, end to end (the
synthesized state machine, real servers): the emulator kills the worker as Lambda does and
the run fails at once, naming the memory size to deploy with, on both channels, when Lambda
reports the kill as a crash, and under the Distributed Map. The job is the fault runs' (tests/
local/fault_job.py: cnn-digits, W = 4) at M = 256 MB.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from fasdl.aws.memory_report import WorkerOutOfMemory
from infra import lambda_errors, segment_states
from tests.local.fault_job import FAST_PEER_WAIT, distributed, errors, fault_job_plan
from tests.local.runs import Job, Run, Synthesized, local_run, synthesizer, with_memory

RUN_TIMEOUT_S = 240  # beside the other xdist worker's load


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job's plan and dataset at M = 256 MB (each test synthesizes its deployment)."""
    plan = fault_job_plan(tmp_path_factory.mktemp("job"))
    return with_memory(plan, 256, plan.parent)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The job's plan on a channel, synthesized once per module per deployment."""
    return synthesizer(tmp_path_factory.mktemp)


def run(job: Job, directory: Path, run_id: str, *args: str) -> Run:
    return local_run(job.plan, job.cdk_out, directory / run_id, run_id, *args,
                     timeout_s=RUN_TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.parametrize("channel", ["s3", "valkey"])
def test_out_of_memory_fails_the_run_at_once_with_what_to_do(
        plan: Path, synthesized: Synthesized, tmp_path: Path, channel: str) -> None:
    """At 256 MB the worker (torch imported: ~290 MB) is killed by the emulator's memory
    limit as Lambda kills it: Runtime.OutOfMemory. No same-size retry: the run fails, and the
    recorded cause names the worker, the planned M and the next M to deploy with."""
    result = run(synthesized(plan, channel), tmp_path, f"oom-{channel}", "--channel", channel)
    assert result.code == 1, result.output[-3000:]
    report = result.report
    assert report["status"] == "FAILED" and report["execution_error"] == "FasDL.RunFailed"
    died = errors(result)
    assert died and set(died) == {lambda_errors.OUT_OF_MEMORY}, died
    assert len(died) <= report["workers"]  # one attempt: never retried at the same size
    failure = report["failure"]
    assert failure is not None and failure["error"] == segment_states.OUT_OF_MEMORY_ERROR
    assert "M = 256 MB" in failure["cause"] and "memory_mb to 384" in failure["cause"]
    assert max(r["peak_rss_mb"] for r in report["invocations"] if r["error"]) >= 256
    assert report["exchange_left"] == 0
    assert result.model is None


@pytest.mark.slow
def test_out_of_memory_reported_as_a_crash_is_told_by_the_report_lines(
        plan: Path, synthesized: Synthesized, tmp_path: Path) -> None:
    """Lambda has also reported a memory kill as Runtime.ExitError 'signal: killed' (a crash,
    rerun at the same size): before the rerun the trigger reads the workers' REPORT lines
    (CloudWatch Logs FilterLogEvents, answered locally from the emulator's measurements), sees
    Max Memory Used at the memory size and fails at once with the measured peak."""
    result = run(synthesized(plan, "s3"), tmp_path, "oom-as-exit", "--oom-error",
                 lambda_errors.EXIT, *FAST_PEER_WAIT)
    assert result.code == 1, result.output[-3000:]
    report = result.report
    died = [i["error"] for i in report["invocations"] if i["error"] and i["worker"] is not None]
    assert lambda_errors.EXIT in died and lambda_errors.OUT_OF_MEMORY not in died, died
    assert len(died) <= report["workers"]  # no rerun at the same size
    # the trigger's retry action is where it was told apart
    assert WorkerOutOfMemory.__name__ in errors(result)
    assert {s["attempt"] for s in report["segments"]} <= {0}
    failure = report["failure"]
    assert failure is not None and failure["error"] == WorkerOutOfMemory.__name__
    # the highest REPORT line the trigger found: one of the killed invocations' peaks (a worker
    # killed after the trigger read the lines may have peaked higher, so not always the max)
    peaks = {math.ceil(r["peak_rss_mb"]) for r in report["invocations"] if r["error"]}
    found = re.search(r"Max Memory Used (\d+) MB of the planned M = Memory Size 256 MB",
                      failure["cause"])
    assert found is not None and int(found.group(1)) in peaks, (failure["cause"], peaks)
    assert int(found.group(1)) >= 256
    assert "memory_mb to 384" in failure["cause"]
    assert result.model is None


@pytest.mark.slow
def test_distributed_map_out_of_memory_fails_naming_the_workers(
        plan: Path, tmp_path: Path) -> None:
    result = run(distributed(plan, tmp_path), tmp_path, "oom-distributed", *FAST_PEER_WAIT)
    assert result.code == 1, result.output[-3000:]
    report = result.report
    assert report["status"] == "FAILED" and report["execution_error"] == "FasDL.RunFailed"
    died = errors(result)
    # children run to their end: a peer of a killed worker may give up waiting for it
    assert lambda_errors.OUT_OF_MEMORY in died, died
    assert set(died) <= {lambda_errors.OUT_OF_MEMORY, "ChannelTimeout", "WorkerFenced"}, died
    assert len(died) <= report["workers"]  # one attempt: never retried at the same size
    failure = report["failure"]
    assert failure is not None and failure["error"] == segment_states.OUT_OF_MEMORY_ERROR
    oom_workers = sorted({r["worker"] for r in report["invocations"]
                          if r["error"] == lambda_errors.OUT_OF_MEMORY})
    assert f"Worker(s) {json.dumps(oom_workers, separators=(',', ':'))} ran out of memory" \
        in failure["cause"]
    assert "M = 256 MB" in failure["cause"] and "memory_mb to 384" in failure["cause"]
    assert result.model is None
