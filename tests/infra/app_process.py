"""``app.py`` in a child process, as `cdk synth` runs it (test_plan_door.py,
test_account_synth.py, test_own_model_synth.py, test_requirements_synth.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from infra.settings import REPO_ROOT, STUB_TORCH_LAYER


def app_env(**extra: str) -> dict[str, str]:
    """This environment with the venv's tools first on PATH and jsii's node warning off."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
            **extra}


def synth_app(plan: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``app.py`` as `cdk synth` runs it, with the stand-in torch layer, into ``out``."""
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "app.py")], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=180, check=False,
        env=app_env(CDK_CONTEXT_JSON=json.dumps({"plan": str(plan),
                                                 "torch_layer": str(STUB_TORCH_LAYER)}),
                    CDK_OUTDIR=str(out)))
