"""Pip requirements files of exact pins: the runtime's own (``functions/requirements.txt``) and
the user's (``workload.requirements``: the packages their model or loss imports).

The user's packages go into a layer of their own beside the torch layer, which already holds
torch and the runtime's packages. Lambda unpacks every layer into the same ``/opt/python``, so a
second copy of a package in another version would mix two versions' files: such a pin is
refused, and one in the same version is left out of the layer. Stdlib only: the layer build,
the planner and the synth read these files.
"""

from __future__ import annotations

import hashlib
import re
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
