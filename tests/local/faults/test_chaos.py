"""Five seeded chaos trials through the synthesized state machine, run as a user runs the
bench: ``python -m bench.chaos --smoke --trials 5 --seed 5`` (its whole path and its JSON last
line, so this is also bench.chaos's smoke-size run in the suite). Every fault kind at least
once, no trial may end with weights other than the undisturbed run's, and at least one must
recover to exactly those weights: five clean failures would pass a runtime that gives up on
every fault.

The smoke size's job is the bench's cut to fit the suite's budget: W = 2 (the fewest processes
that still exchange shards), one epoch in one segment (a fault's rerun still restarts it from
its checkpoint); the reference runs once, on S3 (both channels train bitwise the same
weights). ``python -m bench.chaos`` runs 20 trials of the two-segment W = 4 job.
"""

from __future__ import annotations

import pytest

from bench.chaos_schedule import FAULTS
from tests.bench.smoke_run import run_smoke
from tests.local.chaos_schedule import SEED, TRIALS


@pytest.mark.timeout(600)
@pytest.mark.e2e
@pytest.mark.servers
@pytest.mark.synth
@pytest.mark.sandbox
def test_chaos_trials_recover_or_fail_cleanly() -> None:
    summary, stdout = run_smoke("chaos", "--trials", str(TRIALS), "--seed", str(SEED),
                                timeout_s=540)
    assert {"trials", "identical", "clean_failures", "wrong", "faults", "seed",
            "seconds"} <= set(summary)
    assert (summary["trials"], summary["seed"], summary["wrong"]) == (TRIALS, SEED, 0), stdout
    assert summary["identical"] + summary["clean_failures"] == TRIALS, stdout
    assert summary["identical"] >= 1, stdout  # recovery, not only a clean stop, is proven
    assert {kind for kind, count in summary["faults"].items() if count} == set(FAULTS), stdout
    assert "reference on s3:" in stdout and "reference on valkey" not in stdout
