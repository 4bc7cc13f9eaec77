"""The handlers' runtime dependencies, installed into the layer's python/ directory.

The list is functions/requirements.txt, the one the container image installs too. The torch
archive holds torch alone, so the layer carries these for the target's CPython ABI and
architecture. boto3/botocore are pinned as well: the runtime's own copy changes without notice.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from target_wheel import manylinux_platforms

from fasdl.contract.requirements import read_pins
from infra.lambda_runtime import LambdaTarget

REQUIREMENTS = Path(__file__).resolve().parents[2] / "functions" / "requirements.txt"
# Tests and type stubs are never imported at run time.
PRUNE = ("tests", "__pycache__", "*.pyi")


def read_requirements(path: Path = REQUIREMENTS) -> dict[str, str]:
    """name -> version of every pin; anything but exact pins raises RequirementsError."""
    return read_pins(path)


def pip_install(specs: list[str], python_dir: Path, target: LambdaTarget,
                options: Sequence[str] = ()) -> None:
    """pip-install ``specs`` as wheels for the target into ``python_dir``, then prune what is
    never imported; raises RuntimeError with pip's own message."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
               "--only-binary=:all:", "--implementation", "cp",
               "--python-version", target.python_version, "--abi", target.abi,
               "--target", str(python_dir), "--upgrade", *options]
    for tag in manylinux_platforms(target):
        command += ["--platform", tag]
    completed = subprocess.run([*command, *specs], capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"pip could not install {', '.join(specs)} for {target.describe()}:"
                           f"\n{completed.stderr.strip()}")
    for pattern in PRUNE:
        for path in list(python_dir.rglob(pattern)):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                path.unlink()


def install_runtime_deps(python_dir: Path, target: LambdaTarget,
                         requirements: Path = REQUIREMENTS) -> dict[str, str]:
    """pip-install the pinned wheels for the target into ``python_dir``; returns name -> pin."""
    pins = read_requirements(requirements)
    pip_install([f"{name}=={version}" for name, version in pins.items()], python_dir, target)
    return pins
