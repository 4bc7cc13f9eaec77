"""Full-template snapshots of the three reference stacks and the Valkey plan's cache stack.

Asset hashes (Lambda/layer S3 keys, image tags) are masked so that editing handler code does
not churn the snapshots. After an intended change, review the diff and run
``.venv/bin/python -m pytest tests/infra --snapshot-update``.
"""

from __future__ import annotations

from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension
from syrupy.matchers import path_value

from tests.infra.conftest import PLAN_FILES, Synth

ASSET_HASH = r"[0-9a-f]{64}"
MASK_ASSETS = path_value(
    {r".*\.S3Key$": rf"{ASSET_HASH}\.zip"},
    types=(str,), replacer=lambda data, match: "<asset-hash>.zip", regex=True,
)


@pytest.fixture
def snapshot_json(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("name", list(PLAN_FILES))
def test_template_snapshot(name: str, synths: dict[str, Synth],
                           snapshot_json: SnapshotAssertion) -> None:
    template: dict[str, Any] = synths[name].json
    assert template == snapshot_json(matcher=MASK_ASSETS)


def test_cache_stack_snapshot(valkey_synth: Synth, snapshot_json: SnapshotAssertion) -> None:
    assert valkey_synth.cache is not None
    assert valkey_synth.cache.json == snapshot_json(matcher=MASK_ASSETS)
