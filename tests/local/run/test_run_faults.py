"""`python -m local run` under faults, end to end: the synthesized state machine, real servers,
one process per invocation. Every run trains the same job (cnn-digits, W=4, 4 epochs = 88
iterations), so each must end with the weights of the undisturbed reference run, bit for bit:
a segment too long for the worker timeout is shortened, a killed worker's segment is rerun
from its checkpoint, a restarted Valkey loses its shards and the segment is rerun; a worker
that keeps dying ends the run on the failure path with the error recorded.

The job is planned and synthesized once (``--plan``/``--cdk-out``) to save a synth per run;
a run on the other channel reuses one synth per deployment; the two Valkey faults (a restart,
a VPC worker not ready then throttled) share one run, as do a killed worker and the service
errors of an s3 run. A run the budget guard stopped, kept with ``--keep``, resumes with
``--resume`` to the same weights. The out-of-memory runs are in
tests/local/run/test_run_out_of_memory.py.
The Distributed Map path (W > 40 on AWS) runs the same W = 4 job from a template synthesized
with ``-c inline_map_max_workers=2``.

No assertion here is a speed: the worker timeout that shortens a segment only has to be
shorter than the whole segment (a loaded machine halves it more often, which the test allows),
and a peer waits for a dead worker at least 6 s and 5 slowest recent iterations
(tests/local/fault_job.py), so these runs share the parallel pass.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from fasdl.contract.limits import BUDGET_EXCEEDED
from infra import lambda_errors
from local.aws.template import synthesize
from tests.local.fault_job import (
    FAST_PEER_WAIT,
    SEGMENT,
    distributed,
    errors,
    fault_job_plan,
    train_segment_mode,
)
from tests.local.runs import Job, Run, Synthesized, local_run, resumed_run, synthesizer

RUN_TIMEOUT_S = 240  # beside the other xdist worker's load
CRASH = ["--inject-env", "worker:FASDL_TEST_CRASH_AT_ITERATION=60",  # in segment 2
         "--inject-env", "worker:FASDL_TEST_CRASH_WORKER=2"]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    plan = fault_job_plan(tmp_path_factory.mktemp("job"))
    return Job(plan, synthesize(plan, plan.parent / "cdk.out").parent)


def run(job: Job, directory: Path, run_id: str, *args: str) -> Run:
    """One ``python -m local run`` of the job, reusing its synth."""
    return local_run(job.plan, job.cdk_out, directory / run_id, run_id, *args,
                     timeout_s=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The job's plan on a channel, synthesized once per module per deployment."""
    return synthesizer(tmp_path_factory.mktemp)


@pytest.fixture(scope="module")
def reference(job: Job, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The undisturbed run, two segments of 44 iterations."""
    result = run(job, tmp_path_factory.mktemp("reference"), "reference",
                 "--segment-iterations", str(SEGMENT))
    assert result.code == 0 and result.model is not None, result.output[-3000:]
    assert [(s["attempt"], s["iterations"]) for s in result.report["segments"]] == [
        (0, SEGMENT), (0, SEGMENT)]
    assert errors(result) == [] and result.report["exchange_left"] == 0
    # summary.json's measured figures: 2 segments x 4 workers, 3 trigger calls, finalize
    measured = result.report["summary"]["measured"]
    assert measured["lambda_requests"] == 2 * 4 + 3 + 1, measured
    assert measured["billed_gb_s"]["worker"] > 0 and measured["measured_lambda_usd"] > 0
    assert measured["predicted_cost_usd"] == result.report["predicted_cost_usd"]
    return result.model


@pytest.mark.slow
def test_segment_too_long_for_the_timeout_is_shortened(
        job: Job, reference: bytes, tmp_path: Path) -> None:
    """The plan asks for one segment of 88 iterations; at ~0.19 s each (a 0.15 s delay per
    iteration) it cannot fit a 16 s worker timeout: the workers stop with SegmentTooLong,
    the trigger halves the segment, later segments keep the length (unless they too are too
    long on a loaded machine, then they are halved again), the run finishes with the
    undisturbed run's weights: segment boundaries do not change them."""
    result = run(job, tmp_path, "too-long", "--segment-iterations", str(2 * SEGMENT),
                 "--workers-timeout", "16",
                 "--inject-env", "worker:FASDL_TEST_ITERATION_DELAY_S=0.15",
                 "--inject-env", "worker:FASDL_TIME_MARGIN_S=1")
    assert result.code == 0, result.output[-3000:]
    # a peer of the first worker to stop may give up waiting for its shards instead, and
    # says WorkerFenced when the shortened segment's epoch has superseded it by then
    assert set(errors(result)) <= {"SegmentTooLong", "Sandbox.Timedout", "ChannelTimeout",
                                   "WorkerFenced"}
    assert len(errors(result)) >= 4  # every worker of the first attempt
    segments = result.report["segments"]
    assert segments[0]["attempt"] >= 1 and sum(s["iterations"] for s in segments) == 2 * SEGMENT
    assert segments[0]["iterations"] <= SEGMENT
    for before, after in itertools.pairwise(segments[:-1]):  # the last may be a remainder
        # a segment keeps its predecessor's length unless it failed too and was halved
        assert after["iterations"] == before["iterations"] or (
            after["iterations"] < before["iterations"] and after["attempt"] >= 1), segments
    assert result.model == reference


@pytest.fixture(scope="module")
def killed_and_throttled(job: Job, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One s3 run meets two independent faults (one run instead of two): the first three
    worker invokes are throttled and the first trigger invoke answers a transient Lambda 5xx
    (segment 1, nothing ran), then worker 2 dies at iteration 60 (segment 2)."""
    return run(job, tmp_path_factory.mktemp("killed"), "killed",
               "--segment-iterations", str(SEGMENT), *CRASH, *FAST_PEER_WAIT,
               "--inject-service-error", "worker:throttled:3",
               "--inject-service-error", "trigger:service:1")


@pytest.mark.slow
def test_killed_worker_segment_is_retried_from_its_checkpoint(
        killed_and_throttled: Run, reference: bytes) -> None:
    # the injected service errors (nothing ran) are the other test's
    assert_rerun_at_full_length(killed_and_throttled, reference,
                                injected=frozenset(lambda_errors.SERVICE_ERRORS))


def assert_rerun_at_full_length(result: Run, reference: bytes,
                                injected: frozenset[str] = frozenset()) -> None:
    """Worker 2 died (exit 137), its peers gave up waiting for its shards within seconds (and
    found their epoch superseded once the retry had started), the segment was rerun once at
    full length and the weights are the undisturbed run's."""
    assert result.code == 0, result.output[-3000:]
    assert "Runtime.ExitError" in errors(result)
    assert set(errors(result)) <= {"Runtime.ExitError", "ChannelTimeout", "WorkerFenced",
                                   *injected}
    assert [(s["attempt"], s["iterations"]) for s in result.report["segments"]] == [
        (0, SEGMENT), (1, SEGMENT)]
    assert result.report["summary"]["retried_attempts"] == 1
    assert result.report["exchange_left"] == 0
    assert result.model == reference


@pytest.mark.slow
def test_worker_that_keeps_dying_fails_the_run_cleanly(job: Job, tmp_path: Path) -> None:
    result = run(job, tmp_path, "doomed", "--segment-iterations", str(SEGMENT), *CRASH,
                 *FAST_PEER_WAIT, "--inject-env", "worker:FASDL_TEST_CRASH_ATTEMPTS=99")
    assert result.code == 1, result.output[-3000:]
    report = result.report
    assert report["status"] == "FAILED" and report["execution_error"] == "FasDL.RunFailed"
    assert errors(result, worker=2) == ["Runtime.ExitError"] * 3  # attempt 0 + two retries
    failure = report["failure"]  # runs/<id>/failure.json, written by finalize
    assert failure is not None and failure["error"] == "RetriesExhausted"
    assert "giving up after 2 retries" in failure["cause"]
    assert failure["run"]["segment"]["index"] == 1
    assert report["exchange_left"] == 0  # finalize cleaned exchange/<run_id>/
    assert result.model is None


@pytest.fixture(scope="module")
def valkey_faults(job: Job, synthesized: Synthesized,
                  tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One Valkey run meets two independent faults (one run instead of two): the VPC worker's
    first invoke answers ResourceNotReady (retried 30-60 s later), then throttling; and Valkey
    restarts once iteration 66 (segment 2) is exchanged."""
    return run(synthesized(job.plan, "valkey"), tmp_path_factory.mktemp("valkey-faults"),
               "valkey-faults", "--channel", "valkey", "--segment-iterations", str(SEGMENT),
               "--inject-service-error", "worker:not-ready:1",
               "--inject-service-error", "worker:throttled:2",
               "--restart-cache-at", "66", *FAST_PEER_WAIT,
               "--inject-env", "worker:FASDL_TEST_ITERATION_DELAY_S=0.05")


@pytest.mark.slow
def test_valkey_restart_mid_run_recovers(valkey_faults: Run, reference: bytes) -> None:
    """Valkey restarts once iteration 66 (segment 2) is exchanged: its shards are gone, the
    peers time out waiting, the segment is rerun and the weights are still the same."""
    result = valkey_faults
    assert result.code == 0, result.output[-3000:]
    assert "restarted valkey" in result.output
    assert result.report["channel"] == "valkey"
    assert result.report["exchange_left"] == 0
    assert result.model == reference


@pytest.mark.slow
def test_vpc_function_not_ready_then_throttled_on_valkey(
        valkey_faults: Run, reference: bytes) -> None:
    """Valkey plans put the worker in a VPC: after idling, its first invoke answers
    ResourceNotReady (retried 30-60 s later), then throttling; the run still ends with the
    undisturbed weights, on the other channel."""
    result = valkey_faults
    assert result.code == 0, result.output[-3000:]
    assert result.report["channel"] == "valkey"
    assert result.report["service_errors"]["worker"] == {lambda_errors.NOT_READY: 1,
                                                         lambda_errors.THROTTLED: 2}
    assert result.model == reference


# ---- failures as AWS reports them (infra/lambda_errors.py, the emulator's injections) ----
@pytest.mark.slow
def test_service_errors_are_retried_and_change_nothing(
        killed_and_throttled: Run, reference: bytes) -> None:
    """Throttled workers and a transient Lambda 5xx on the trigger: nothing ran, the state
    machine's retriers invoke again, and the run ends with the undisturbed weights. They hit
    segment 1, which is not rerun; the run's one rerun is segment 2's, for its killed worker."""
    result = killed_and_throttled
    assert result.code == 0, result.output[-3000:]
    injected = result.report["service_errors"]
    assert injected["worker"] == {lambda_errors.THROTTLED: 3}
    assert sum(injected["trigger"].values()) == 1
    assert result.report["segments"][0]["attempt"] == 0  # segment 1 was not rerun
    assert result.report["summary"]["retried_attempts"] == 1  # only segment 2's, the crash's
    assert result.model == reference


# ---- the Distributed Map path (children never fail; the Segment outcome? Choice decides) ---
@pytest.mark.slow
def test_distributed_map_killed_worker_is_retried_at_full_length(
        job: Job, reference: bytes, tmp_path: Path) -> None:
    """Under a Distributed Map a crash used to surface as ExceedToleratedFailureThreshold and
    halve the segment; now the crashed child reports its status, the segment is rerun at full
    length from its checkpoint and the weights are those of the undisturbed run."""
    wide = distributed(job.plan, tmp_path)
    assert train_segment_mode(wide) == "DISTRIBUTED"
    result = run(wide, tmp_path, "killed-distributed", "--segment-iterations", str(SEGMENT),
                 *CRASH, *FAST_PEER_WAIT)
    assert_rerun_at_full_length(result, reference)


FENCE_CHECK = ["--inject-env", "worker:FASDL_FENCE_CHECK_S=1"]


@pytest.mark.slow
def test_a_worker_invoked_twice_trains_once_and_its_zombies_are_fenced(
        job: Job, reference: bytes, tmp_path: Path) -> None:
    """An Invoke fails with Lambda.ServiceException 10 s after the worker started; the Task's
    retrier starts the same worker again in the same epoch. The second copy finds the first's
    claim and stops at once with WorkerDuplicate, writing nothing; the Map fails, the segment
    is rerun under a new epoch, and the first attempt's workers, zombies still training,
    stop at their next fence check with WorkerFenced. The weights are the undisturbed run's.
    One segment of the job's 88 iterations at ~0.16 s each outlasts the 10 s before the retry,
    so the first attempt's workers are still training when they are fenced."""
    result = run(job, tmp_path, "twice", "--segment-iterations", str(2 * SEGMENT),
                 "--inject-service-error", "worker:service-after-start:1", *FENCE_CHECK,
                 "--inject-env", "worker:FASDL_TEST_ITERATION_DELAY_S=0.12", *FAST_PEER_WAIT)
    assert result.code == 0, result.output[-3000:]
    assert {"WorkerDuplicate", "WorkerFenced"} <= set(errors(result)), errors(result)
    assert set(errors(result)) <= {lambda_errors.TRANSIENT[0], "WorkerDuplicate",
                                   "WorkerFenced", "ChannelTimeout"}
    assert result.report["segments"][0]["attempt"] == 1
    assert result.model == reference


@pytest.mark.slow
def test_a_budget_stop_resumed_from_its_kept_checkpoint_ends_bitwise(
        job: Job, reference: bytes, tmp_path: Path) -> None:
    """``--budget-usd 0.0001``: the first segment alone costs more, so the trigger's ``next``
    stops the run before the second (BUDGET_EXCEEDED, exit 1, the checkpoint kept and the
    resume named); ``--keep`` keeps it, and ``--resume`` with a budget ends with the
    undisturbed run's weights (issue 43)."""
    kept = tmp_path / "kept"
    result = run(job, tmp_path, "budget", "--segment-iterations", str(SEGMENT),
                 "--budget-usd", "0.0001", "--keep", str(kept))
    report = result.report
    assert result.code == 1, result.output[-3000:]
    assert report["status"] == BUDGET_EXCEEDED and report["execution_error"] == BUDGET_EXCEEDED
    assert [s["index"] for s in report["segments"]] == [0]  # the second one never started
    assert len([i for i in report["invocations"] if i["worker"] is not None]) == 4
    stop = report["stop"]
    assert stop["checkpoint_kept"], stop  # the local S3 still holds its manifest
    assert f"checkpoint/it/{SEGMENT:08d}/" in stop["checkpoint_key"]
    assert "limits.budget_usd $0.0001" in stop["reason"]
    resume = stop["resume"]
    assert resume["input"]["resume"]["segment"]["start_iteration"] == SEGMENT
    assert resume["input"]["limits"]["budget_usd"] > 0.0001
    assert "aws stepfunctions start-execution" in resume["command"]
    assert "to resume on AWS" in result.output and resume["command"] in result.output
    measured = report["failure"]["measured"]  # the first segment's 4 workers, 2 trigger calls
    assert measured["lambda_requests"] == 4 + 2 and measured["billed_gb_s"]["worker"] > 0
    assert measured["measured_lambda_usd"] > 0.0001
    assert report["summary"] is None and result.model is None
    assert (kept / "results" / stop["checkpoint_key"]).is_file()

    resumed = resumed_run(kept, job.cdk_out, tmp_path / "resumed", "--budget-usd", "5",
                          timeout_s=RUN_TIMEOUT_S)
    assert resumed.code == 0, resumed.output[-3000:]
    assert "resuming run budget from" in resumed.output
    # the report reads the results bucket: the kept segment 0 and this run's segment 1, which
    # alone its 4 worker invocations trained
    assert [(s["index"], s["iterations"]) for s in resumed.report["segments"]] == [
        (0, SEGMENT), (1, SEGMENT)]
    assert len([i for i in resumed.report["invocations"] if i["worker"] is not None]) == 4
    assert resumed.model == reference  # bit for bit the unstopped run's weights

