"""The handlers' pure runtime dependencies, installed into the layer's python/ directory.

The Lambda Python runtime ships boto3 but not numpy, redis, Powertools or google-crc32c, and
the torch archive holds torch alone, so the layer carries them for the function's
architecture. Pins match pyproject.toml (a test checks it).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

RUNTIME_DEPS = ("numpy==2.4.6", "redis==8.1.0", "aws-lambda-powertools==3.37.0",
                "google-crc32c==1.9.0")
PLATFORMS = {  # Lambda's Python 3.11 runs on Amazon Linux 2023 (glibc 2.34)
    "x86_64": ["manylinux_2_28_x86_64", "manylinux2014_x86_64"],
    "arm64": ["manylinux_2_28_aarch64", "manylinux2014_aarch64"],
}
# Tests and type stubs are never imported at run time.
PRUNE = ("tests", "__pycache__", "*.pyi")


def install_runtime_deps(python_dir: Path, arch: str) -> dict[str, str]:
    """pip-install the pinned wheels for ``arch`` into ``python_dir``; returns name -> pin."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
               "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
               "--target", str(python_dir), "--upgrade"]
    for tag in PLATFORMS[arch]:
        command += ["--platform", tag]
    completed = subprocess.run([*command, *RUNTIME_DEPS], capture_output=True, text=True,
                               check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"pip could not install {', '.join(RUNTIME_DEPS)} for {arch}:\n"
                           f"{completed.stderr.strip()}")
    for pattern in PRUNE:
        for path in list(python_dir.rglob(pattern)):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                path.unlink()
    return dict(dep.split("==") for dep in RUNTIME_DEPS)
