"""What the planner and the emulator's per-sandbox shaping import: never torch.

local.lambda_.invoke imports local.lambda_.lambda_speed (and with it planner.model.inputs.profiles)
into every emulated sandbox, the 256 MB trigger's included. When planner/model/inputs/recipe.py took
a constant from fasdl.training.optimizers, that pulled torch (~190 MB) into the trigger, which then
died of Runtime.OutOfMemory under Lambda emulation, and every `python -m planner` paid a second of
torch import.
"""

from __future__ import annotations

import json
import subprocess
import sys

from infra.settings import REPO_ROOT

HEAVY = ("torch", "scipy.optimize", "matplotlib", "boto3")
MODULES = ("planner.commands.cli", "planner.search.searches", "planner.model.inputs.profiles",
           "planner.model.inputs.recipe", "local.lambda_.lambda_speed", "local.lambda_.shaping")


def test_planner_and_sandbox_shaping_import_no_torch() -> None:
    code = (f"import importlib, json, sys\n"
            f"for name in {MODULES!r}: importlib.import_module(name)\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, check=True,
                          env={"PYTHONPATH": f"{REPO_ROOT / 'functions'}:{REPO_ROOT}",
                               "PATH": "/usr/bin:/bin"})
    assert json.loads(done.stdout) == []
