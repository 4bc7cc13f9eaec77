"""Fixtures of the torch layer tests: the real layer (built once per session) and its scan.

The build modules live in layers/torch/ and import each other as top-level modules (build.py
runs as a script), so that folder goes on sys.path here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYER_SRC = ROOT / "layers" / "torch"
if str(LAYER_SRC) not in sys.path:
    sys.path.insert(0, str(LAYER_SRC))

import lambda_scan  # noqa: E402

BUILD = LAYER_SRC / "build.py"
WHEEL_DIR = Path("/opt/wheels")


def find_wheel() -> Path | None:
    """The cp311 torch CPU wheel to build from: $FASDL_TORCH_WHEEL, else /opt/wheels."""
    env = os.environ.get("FASDL_TORCH_WHEEL")
    if env:
        return Path(env)
    wheels = sorted(WHEEL_DIR.glob("torch-2.13.0+cpu-cp311-*x86_64.whl"))
    return wheels[-1] if wheels else None


@pytest.fixture(scope="session")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The real layer at zstd -3, for cp311 (--python-override: the wheel here is cp311)."""
    out = tmp_path_factory.mktemp("torch-layer") / "dist"
    cmd = [sys.executable, str(BUILD), "--level", "3", "--out", str(out),
           "--python-override", "3.11", "--function-dir", str(ROOT / "functions")]
    wheel = find_wheel()
    if wheel is not None:
        cmd += ["--wheel", str(wheel)]
        print(f"building from {wheel}")
    else:
        print(f"no torch CPU wheel in {WHEEL_DIR}; build.py falls back to `pip download`")
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, f"build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    manifest = json.loads((out / "torch.tar.zst.json").read_text())
    yield {"out": out, "manifest": manifest, "build_s": time.monotonic() - start,
           "stdout": proc.stdout}
    shutil.rmtree(out, ignore_errors=True)  # pytest keeps old basetemps; this one is 210 MB


@pytest.fixture(scope="session")
def layer_inventory(layer: dict[str, Any]) -> lambda_scan.Inventory:
    """The built layer read once; each test judges it against its own target."""
    inv = lambda_scan.inventory(layer["out"], ROOT / "functions")
    print(f"scan: {len(inv.names):,} files, {len(inv.elves)} ELF, {inv.seconds:.1f} s")
    return inv
