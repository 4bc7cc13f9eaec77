"""Running a benchmark at its smoke size (bench/smoke.py) as ``make bench`` runs it: ``python -m
bench.NAME`` in a child process from the repository root, with the suite's import path, and
reading its last stdout line, the one JSON object every bench promises."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.smoke import SMOKE_ENV

ROOT = Path(__file__).resolve().parents[2]
# pyproject.toml's pythonpath: the runtime's package root, then the repository
PYTHONPATH = os.pathsep.join(str(ROOT / part) for part in ("functions", "."))
DOCS = (ROOT / "docs" / "results.md", ROOT / "docs" / "results")


def run_smoke(bench: str, *args: str, timeout_s: float,
              env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """``python -m bench.BENCH ARGS`` at the smoke size: its JSON summary and its stdout.
    Its temporary folders go to a short folder of its own (a SeaweedFS socket path must stay
    under 108 bytes), removed afterwards."""
    scratch = tempfile.mkdtemp(prefix="fsm-")
    try:
        done = subprocess.run(
            [sys.executable, "-m", f"bench.{bench}", *args], cwd=ROOT, capture_output=True,
            text=True, timeout=timeout_s, check=False,
            env={**os.environ, SMOKE_ENV: "1", "PYTHONPATH": PYTHONPATH, "TMPDIR": scratch,
                 **(env or {})})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    output = f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, output
    assert "smoke size" in done.stdout, output  # it says it ran small and left the docs be
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(summary, dict), output
    return summary, done.stdout


def docs_state() -> dict[str, str]:
    """A digest of every file under docs/results.md and docs/results/."""
    files = [DOCS[0], *sorted(p for p in DOCS[1].rglob("*") if p.is_file())]
    return {str(path.relative_to(ROOT)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in files}


@pytest.fixture
def docs_untouched() -> Iterator[None]:
    """Fails the test when the smoke run rewrote the results document or its folder."""
    before = docs_state()
    yield
    assert docs_state() == before, "a smoke-size bench rewrote docs/results.md or docs/results/"
