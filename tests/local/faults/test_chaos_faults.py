"""The chaos trials' storage-fault options (local/faults/chaos_faults.py), schedules
(bench/chaos_schedule.py) and verdicts (bench/chaos.py), without running anything."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.chaos import Outcome, classify
from bench.chaos_schedule import FAULTS, Shape, Trial, draw_trials
from fasdl.exchange.wire import FrameError, decode_shard
from local.__main__ import main
from local.faults.chaos_faults import bad_frame
from tests.local.chaos_schedule import SEED, TRIALS


@pytest.mark.parametrize("option", ["--restart-s3-at", "--plant-stale-frame",
                                    "--truncate-frame"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_non_positive_iteration_is_refused_by_name(
        option: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", option, value]) == 2
    captured = capsys.readouterr()
    assert f"{option} must be > 0, got {value}" in captured.err
    assert "started" not in captured.out


@pytest.mark.parametrize("option", ["--restart-s3-at", "--plant-stale-frame",
                                    "--truncate-frame"])
def test_non_integer_iteration_is_refused_by_name(
        option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", option, "soon"])
    assert exited.value.code == 2
    assert option in capsys.readouterr().err


def test_planted_frames_are_rejected_by_the_live_reader() -> None:
    """A frame under an older epoch's identity, or a torn one, never decodes as the live
    epoch's merged shard."""
    live = "run-1/3"
    stale = bad_frame("run-1", 3, 17, 100, stale=True)
    with pytest.raises(FrameError, match="another run"):
        decode_shard(stale, run=live, iteration=17, shard=0, worker=0, expected_count=100,
                     dtype=np.float32)
    assert decode_shard(stale, run="run-1/2", iteration=17, shard=0).tolist() == [0.5] * 100
    torn = bad_frame("run-1", 3, 17, 100, stale=False)
    with pytest.raises(FrameError, match="truncated"):
        decode_shard(torn, run=live, iteration=17, shard=0)


ONE_SEGMENT = Shape(iterations=22, workers=2, segments=1)  # tests/local/faults/test_chaos.py's job


def test_schedules_are_seeded_and_five_trials_cover_every_fault() -> None:
    trials = draw_trials(TRIALS, SEED, ONE_SEGMENT)
    assert len(FAULTS) == 13
    assert {kind for trial in trials for kind in trial.faults} == set(FAULTS)
    assert all(1 <= len(trial.faults) <= 3 for trial in trials)
    assert all(t.channel == "valkey" for t in trials
               if {"valkey_restart", "cache_full", "zombie_leftovers"} & set(t.faults))
    stalled = [t for t in trials if "trigger_retry" in t.faults]
    assert stalled and all(
        f"trigger:FASDL_TEST_FENCE_STALL=15:{Path('r')}.fence-stall" in t.options(Path("r"))
        for t in stalled)
    # three kinds in a trial only where fewer could not cover them all (the smoke's one: two)
    assert all(len(t.faults) <= 2 for seed in range(20) for t in draw_trials(1, seed,
                                                                              ONE_SEGMENT))
    again = draw_trials(TRIALS, SEED, ONE_SEGMENT)
    assert [t.options(Path("r")) for t in trials] == [t.options(Path("r")) for t in again]


@pytest.mark.parametrize(("segments", "action"), [(1, "start"), (2, "next")])
def test_a_late_trigger_is_the_first_next_or_the_start_of_a_one_segment_job(
        segments: int, action: str) -> None:
    shape = Shape(iterations=44, workers=4, segments=segments)
    late = next(t for seed in range(50) for t in draw_trials(20, seed, shape)
                if "late_trigger" in t.faults)
    options = late.options(Path("r"))
    assert f"trigger@{action}:service-after-start:1" in options
    assert f"trigger:FASDL_TEST_LATE_CALL=60@{action}:{Path('r')}.late-call" in options


def test_zombie_leftovers_check_the_fence_rarely_on_a_capped_cache() -> None:
    shape = Shape(iterations=44, workers=4, segments=2)
    trial = next(t for t in draw_trials(20, 12, shape) if "zombie_leftovers" in t.faults)
    options = trial.options(Path("r"))
    assert trial.channel == "valkey" and "--cache-at-peak" in options
    assert "worker:FASDL_FENCE_CHECK_S=6" in options
    assert "worker:service-after-start:1" in options


def test_verdicts() -> None:
    failed = {"status": "FAILED", "failure": {"error": "RetriesExhausted", "cause": "..."}}
    plain = Trial(0, "s3", {"killed": "worker 1 at iteration 9"})
    assert classify(Outcome(0, "", {}, b"w", 1.0), b"w", plain)[0] == "identical"
    assert classify(Outcome(0, "", {}, b"x", 1.0), b"w", plain)[0] == "wrong"
    assert classify(Outcome(1, "", failed, None, 1.0), b"w", plain)[0] == "clean_failure"
    assert classify(Outcome(1, "", {"status": "TIMED_OUT"}, None, 1.0), b"w",
                    plain)[0] == "wrong"
    assert classify(Outcome(-1, "", None, None, 1.0), b"w", plain)[0] == "wrong"


def test_a_broken_promise_is_wrong_even_with_the_right_weights() -> None:
    """Evictions at the cap, an unrefused second execution, a late call that cost a retry."""
    capped = Trial(0, "valkey", {"cache_full": "capped"})
    evicted = "WARNING: the cache evicted 3 keys at the planned data cap: ..."
    assert classify(Outcome(0, evicted, {}, b"w", 1.0), b"w", capped) == (
        "wrong", "the cache evicted keys at the planned cap")
    twice = Trial(0, "s3", {"same_run_id": "again"})
    refused = {"second_start": {"status": "FAILED", "error": "RunExists"}}
    assert classify(Outcome(0, "", refused, b"w", 1.0), b"w", twice)[0] == "identical"
    for second in ({"status": "SUCCEEDED", "error": None}, {"status": "NOT_STARTED"}, None):
        verdict = classify(Outcome(0, "", {"second_start": second}, b"w", 1.0), b"w", twice)
        assert verdict[0] == "wrong" and "not refused with RunExists" in verdict[1]
    late = Trial(0, "s3", {"late_trigger": "late"})
    retried = {"segments": [{"attempt": 0}, {"attempt": 1}],
               "invocations": [{"error": "WorkerFenced"}]}
    assert classify(Outcome(0, "", {"segments": [{"attempt": 0}]}, b"w", 1.0), b"w",
                    late)[0] == "identical"
    verdict = classify(Outcome(0, "", retried, b"w", 1.0), b"w", late)
    assert verdict[0] == "wrong" and "'WorkerFenced': 1" in verdict[1]
    killed = {"segments": [{"attempt": 0}],
              "invocations": [{"function": "ComputeTrigger54C2BCAB", "error": "Runtime.ExitError"}]}
    verdict = classify(Outcome(0, "", killed, b"w", 1.0), b"w", late)
    assert verdict[0] == "wrong" and "killed at the run's end" in verdict[1]
