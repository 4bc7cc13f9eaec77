"""The planned local job's defaults: whole-epoch segments, at most DEFAULT_SEGMENTS of them."""

from __future__ import annotations

import json

import pytest

from fasdl.plan import Plan
from infra.settings import DEFAULT_PLAN_PATH
from local.runner import DEFAULT_EPOCHS, DEFAULT_SEGMENTS, whole_epoch_segments


@pytest.mark.parametrize(("epochs", "epochs_per_segment"), [(1, 1), (3, 1), (10, 1), (25, 3),
                                                             (DEFAULT_EPOCHS, 4)])
def test_segments_are_whole_epochs_and_at_most_the_default_count(
        epochs: int, epochs_per_segment: int) -> None:
    data = json.loads(DEFAULT_PLAN_PATH.read_text())
    data["training"]["epochs"] = epochs
    plan = whole_epoch_segments(Plan.from_dict(data))
    per_epoch = plan.iterations_per_epoch
    assert plan.training.segment_iterations == per_epoch * epochs_per_segment
    segments = -(-epochs * per_epoch // plan.training.segment_iterations)
    assert segments <= DEFAULT_SEGMENTS
