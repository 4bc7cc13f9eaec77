"""tests/examples.py: the fast tier runs the heaviest properties at a quarter of their
examples, never below the floor; the full suite at their count."""

from __future__ import annotations

import pytest

from tests.examples import FAST_MIN, FAST_TIER_ENV, examples


def test_the_full_suite_keeps_every_example(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAST_TIER_ENV, raising=False)
    assert [examples(n) for n in (15, 40, 60)] == [15, 40, 60]


def test_the_fast_tier_runs_a_quarter_at_least_the_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAST_TIER_ENV, "1")
    assert [examples(n) for n in (15, 40, 60)] == [FAST_MIN, 10, 15]
