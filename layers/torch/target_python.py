"""The target's Python: finding it, and what the layer build runs with it.

Bytecode is version-specific, so the .pyc files shipped in the torch tree must come from an
interpreter of the Lambda target's Python version, not from whatever runs the build.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from target_wheel import TargetMismatch

from infra.lambda_runtime import LambdaTarget

# A cold import without .pyc files, measured here (README "Precompiled bytecode").
NO_PYC_COST = "about 4 s more per cold start (6.7 s against 2.3 s for import + one step)"

# One training step using what FasDL's runtime touches. Run on the staged tree at build time
# to prove it works without site-packages and to leave .pyc files for exactly these modules.
SMOKE = r"""
import io, json, sys
sys.path.insert(0, sys.argv[1])
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                    nn.Flatten(), nn.Dropout(0.1), nn.Linear(4 * 3 * 3, 10))
data = DataLoader(TensorDataset(torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))), 4)
for opt in (torch.optim.SGD(net.parameters(), 0.1, momentum=0.9),
            torch.optim.Adam(net.parameters(), 1e-3)):
    for x, y in data:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
vec = torch.nn.utils.parameters_to_vector(net.parameters())
torch.nn.utils.vector_to_parameters(vec, net.parameters())
buf = io.BytesIO()
torch.save(net.state_dict(), buf)
buf.seek(0)
net.load_state_dict(torch.load(buf))
outside = sorted({m.split(".")[0] for m, mod in list(sys.modules.items())
                  if "-packages" in (getattr(mod, "__file__", None) or "")})
print(json.dumps({"torch": torch.__version__, "loss": loss.item(), "outside": outside}))
"""

def interpreter_version(python: str) -> tuple[int, int] | None:
    """(major, minor) of an interpreter, or None if it does not run (e.g. a pyenv shim)."""
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        return None
    fields = out.stdout.split()
    if out.returncode != 0 or len(fields) != 2:
        return None
    return int(fields[0]), int(fields[1])


def find_target_python(target: LambdaTarget, explicit: Path | None) -> str | None:
    """An interpreter of the target's Python version for .pyc files and the smoke test.

    Order: --target-python, this interpreter, ``python3.X`` on PATH, pyenv's 3.X versions.
    """
    if explicit is not None:
        found = interpreter_version(str(explicit))
        if found != target.python:
            raise TargetMismatch(
                f"--target-python {explicit} is Python "
                f"{'.'.join(map(str, found)) if found else '(does not run)'}, but the layer "
                f"targets Python {target.python_version} ({target.describe()})")
        return str(explicit)
    if sys.version_info[:2] == target.python:
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    versions = sorted(pyenv.glob(f"{target.python_version}*/bin/python"),
                      key=lambda p: [int(x) if x.isdigit() else 0
                                     for x in re.split(r"[.-]", p.parents[1].name)],
                      reverse=True)
    on_path = shutil.which(f"python{target.python_version}")
    for candidate in [*([on_path] if on_path else []), *map(str, versions)]:
        if interpreter_version(candidate) == target.python:
            return candidate
    return None


def precompile(stage: Path, target: LambdaTarget, python: str | None,
               log: Callable[[str], None]) -> str:
    """Leave .pyc files for the target's Python: bytecode is version-specific.

    Native arch: the smoke test proves the tree and compiles exactly what it imports ("used").
    Cross arch: compile everything with the target's Python ("all"). No such Python: "none".
    """
    if python is None:
        print(no_pyc_warning(target), file=sys.stderr, flush=True)
        return "none"
    if target.machine != platform.machine():
        # Can't run an aarch64 torch here; bytecode is arch-independent, so compile it all.
        log(f"cross build: compiling every module to .pyc with {python}")
        subprocess.run([python, "-m", "compileall", "-q", "-j", "0", str(stage)], check=True)
        return "all"
    log(f"smoke test with {python}: import torch and train from the staged tree, "
        "without site-packages")
    proc = subprocess.run([python, "-I", "-S", "-c", SMOKE, str(stage)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the stripped torch tree failed the smoke test:\n"
                           f"{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["outside"]:
        raise RuntimeError(f"smoke test imported modules from outside the tree: "
                           f"{result['outside']}")
    log(f"smoke test ok: torch {result['torch']}, loss {result['loss']:.3f}")
    return "used"


def no_pyc_warning(target: LambdaTarget) -> str:
    bar = "!" * 78
    version = target.python_version
    return (f"\n{bar}\nWARNING: no Python {version} interpreter found (--target-python, "
            f"python{version} on PATH, ~/.pyenv/versions/{version}*), so the layer ships NO "
            f".pyc files.\nLambda then compiles torch at every cold start: {NO_PYC_COST}.\n"
            f"Install Python {version} or pass --target-python PATH.\n{bar}\n")
