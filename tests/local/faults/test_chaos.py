"""Five seeded chaos trials (bench/chaos.py) through the synthesized state machine: every fault
kind at least once, no trial may end with weights other than the undisturbed run's, and at
least one must recover to exactly those weights: five clean failures would pass a runtime
that gives up on every fault.

The job is the bench's cut to fit the suite's budget: W = 2 (the fewest processes that still
exchange shards), one epoch in one segment (a fault's rerun still restarts it from its
checkpoint); the reference runs once, on S3 (both channels train bitwise the same weights).
``python -m bench.chaos`` runs 20 trials of the two-segment W = 4 job.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import Job, run_trials
from bench.chaos_schedule import FAULTS
from tests.local.chaos_schedule import SEED, TRIALS


@pytest.mark.slow
def test_chaos_trials_recover_or_fail_cleanly(tmp_path: Path) -> None:
    lines: list[str] = []

    def say(text: str) -> None:
        lines.append(text)
        print(text, flush=True)

    summary = run_trials(TRIALS, SEED, Job(workers=2, epochs=1), tmp_path, say,
                         reference_channels=("s3",))
    log = "\n".join(lines)
    assert summary["wrong"] == 0, log
    assert summary["identical"] + summary["clean_failures"] == TRIALS, log
    assert summary["identical"] >= 1, log  # recovery, not only a clean stop, is proven
    assert {kind for kind, count in summary["faults"].items() if count} == set(FAULTS), log
