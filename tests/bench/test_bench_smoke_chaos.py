"""bench.chaos at its smoke size (bench/smoke.py): one synth, the undisturbed reference and one
trial (a torn frame planted and a second execution with the run id, on S3) through ``python -m
local run``; the JSON summary it promises as the last line."""

from __future__ import annotations

import pytest

from tests.bench.smoke_run import run_smoke


@pytest.mark.timeout(600)
@pytest.mark.e2e
@pytest.mark.servers
@pytest.mark.synth
@pytest.mark.sandbox
def test_chaos_smoke() -> None:
    summary, stdout = run_smoke("chaos", timeout_s=540)
    assert {"trials", "identical", "clean_failures", "wrong", "faults", "seed",
            "seconds"} <= set(summary)
    assert (summary["trials"], summary["seed"], summary["wrong"]) == (1, 290, 0)
    assert summary["identical"] + summary["clean_failures"] == 1
    assert {kind for kind, count in summary["faults"].items() if count} == {
        "truncated_frame", "same_run_id"}
    assert "synthesized s3 in" in stdout  # the one channel its schedule uses
