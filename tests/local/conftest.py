"""Fixtures for local/: the default plan synthesized ONCE with the real CLI (npx cdk synth)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infra.settings import DEFAULT_PLAN_PATH
from local.template import LocalTemplate, load_template, synthesize

STUBS = Path(__file__).parent / "stubs"


@pytest.fixture(scope="session")
def default_template(tmp_path_factory: pytest.TempPathFactory) -> LocalTemplate:
    if shutil.which("npx") is None:
        pytest.fail("npx not found: tests/local need node (make setup)")
    outdir = tmp_path_factory.mktemp("cdk-out")
    return load_template(synthesize(DEFAULT_PLAN_PATH, outdir), region="us-east-1")
