"""The chaos trials' storage-fault options (local/chaos_faults.py) and schedules
(bench/chaos.py), without running anything."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.chaos import FAULTS, Outcome, classify, draw_trials
from fasdl.exchange.wire import FrameError, decode_shard
from local.__main__ import main
from local.chaos_faults import bad_frame
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


def test_schedules_are_seeded_and_five_trials_cover_every_fault() -> None:
    trials = draw_trials(TRIALS, SEED, iterations=44, workers=2)
    assert {kind for trial in trials for kind in trial.faults} == set(FAULTS)
    assert all(1 <= len(trial.faults) <= 2 for trial in trials)
    assert all(t.channel == "valkey" for t in trials
               if {"valkey_restart", "cache_full"} & set(t.faults))
    stalled = [t for t in trials if "trigger_retry" in t.faults]
    assert stalled and all(
        f"trigger:FASDL_TEST_FENCE_STALL=15:{Path('r')}.fence-stall" in t.options(Path("r"))
        for t in stalled)
    again = draw_trials(TRIALS, SEED, iterations=44, workers=2)
    assert [t.options(Path("r")) for t in trials] == [t.options(Path("r")) for t in again]


def test_verdicts() -> None:
    failed = {"status": "FAILED", "failure": {"error": "RetriesExhausted", "cause": "..."}}
    assert classify(Outcome(0, "", {}, b"w", 1.0), b"w")[0] == "identical"
    assert classify(Outcome(0, "", {}, b"x", 1.0), b"w")[0] == "wrong"
    assert classify(Outcome(1, "", failed, None, 1.0), b"w")[0] == "clean_failure"
    assert classify(Outcome(1, "", {"status": "TIMED_OUT"}, None, 1.0), b"w")[0] == "wrong"
    assert classify(Outcome(-1, "", None, None, 1.0), b"w")[0] == "wrong"
