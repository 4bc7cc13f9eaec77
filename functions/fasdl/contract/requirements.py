"""Pip requirements files of exact pins: the runtime's own (``functions/requirements.txt``) and
the user's (``workload.requirements``: the packages their model or loss imports).

The user's packages go into a layer of their own beside the torch layer, which already holds
torch and the runtime's packages. Lambda unpacks every layer into the same ``/opt/python``, so a
second copy of a package in another version would mix two versions' files: such a pin is
refused, and one in the same version is left out of the layer. Stdlib only: the layer build,
the planner and the synth read these files.

On the machine that plans, synthesizes and runs locally, the same pins go into a local layer
for this interpreter (:func:`local_layer`), built once per file content by
``layers/torch/requirements_layer.py --local`` and kept under ``$FASDL_LOCAL_LAYERS`` (default
``~/.cache/fasdl/requirements``): building the model there, and the emulated functions, import
the packages from it as Lambda imports them from the layer, never from the project's .venv.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from fasdl.contract.fields import PlanError

FIELD = "workload.requirements"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)$")
# In the torch layer's archive (layers/torch/build.py DEPS) beside torch itself, not pinned
# anywhere a user could read
TORCH_PACKAGES = frozenset({"torch", "functorch", "torchgen", "typing-extensions", "sympy",
                            "mpmath"})


def normalized(name: str) -> str:
    """PEP 503's comparison form: case-insensitive, runs of '-', '_', '.' as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


class RequirementsError(ValueError):
    """A requirements file that is not a list of exact pins; the message names file and line."""


def read_pins(path: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line; anything else raises
    RequirementsError naming the file and the line (the layers install exact pins)."""
    try:
        text = path.read_text()
    except OSError as error:
        raise RequirementsError(f"cannot read {path}: {error.strerror or error}") from error
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = PIN.match(line)
        if match is None:
            raise RequirementsError(f"{path}:{number}: {line!r} is not an exact pin; write "
                                    "name==version (the layers install exact pins)")
        pins[match[1]] = match[2]
    return pins


def user_pins(path: Path, provided: dict[str, str]) -> dict[str, str]:
    """The user's pins the layer must install: those the torch layer does not already hold.
    ``provided`` is the runtime's pins; a different version of one of them, or torch and its
    packages at all, raise PlanError naming the field."""
    runtime = {normalized(name): version for name, version in provided.items()}
    wanted: dict[str, str] = {}
    try:
        pins = read_pins(path)
    except RequirementsError as error:
        raise PlanError(FIELD, str(error)) from error
    for name, version in pins.items():
        key = normalized(name)
        if key in TORCH_PACKAGES:
            raise PlanError(FIELD, f"{path}: {name} comes with the torch layer "
                                   f"(torch 2.13.0 CPU); remove it from the file")
        if key in runtime and runtime[key] != version:
            raise PlanError(FIELD, f"{path}: {name}=={version}, but the functions already "
                                   f"ship {name}=={runtime[key]} (functions/requirements.txt);"
                                   f" pin {runtime[key]} or remove it")
        if key not in runtime:
            wanted[name] = version
    if not wanted:
        raise PlanError(FIELD, f"{path} pins nothing the functions do not already ship; "
                               "remove workload.requirements")
    return wanted


def requirements_digest(path: Path) -> str:
    """sha256 of the file's bytes: the layer's manifest records it, the synth compares."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


LOCAL_LAYERS_ENV = "FASDL_LOCAL_LAYERS"
# Written last by layers/torch/requirements_layer.py (either target): what the synth checks a
# layer against; a folder without it is not a finished layer
REQUIREMENTS_MANIFEST = "requirements.json"
_BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "layers" / "torch" / "requirements_layer.py"


def local_layer_dir(path: Path) -> Path:
    """Where the local layer of this file's exact bytes lives, for this interpreter."""
    root = os.environ.get(LOCAL_LAYERS_ENV) or Path.home() / ".cache" / "fasdl" / "requirements"
    return Path(root) / f"{sys.implementation.cache_tag}-{requirements_digest(path)[:16]}"


def local_layer(path: Path) -> Path:
    """The local layer of ``path``'s pins (its ``python/`` holds the packages), built on first
    use from pip's configured index; raises PlanError naming the field in one line when a pin
    is refused or pip cannot install it (a version that does not exist, say)."""
    try:
        read_pins(path)  # a file that is not exact pins: one line before pip is asked
    except RequirementsError as error:
        raise PlanError(FIELD, str(error)) from None
    folder = local_layer_dir(path)
    if (folder / REQUIREMENTS_MANIFEST).is_file():
        return folder
    if not _BUILD_SCRIPT.is_file():
        raise PlanError(FIELD, f"cannot build the local layer of {path}: {_BUILD_SCRIPT} is "
                               "missing (it comes with a checkout of the project)")
    done = subprocess.run([sys.executable, str(_BUILD_SCRIPT), "--local", "--requirements",
                           str(path), "--out", str(folder)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        message = lines[-1].removeprefix("error: ") if lines else done.stderr.strip()[-500:]
        raise PlanError(FIELD, message.removeprefix(f"plan field '{FIELD}': "))
    print(f"fasdl: built the local layer of {path} in {folder} (pip, once per file)",
          file=sys.stderr, flush=True)
    return folder
