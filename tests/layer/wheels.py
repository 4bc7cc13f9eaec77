"""Wheels made on the spot for the requirements-layer tests: a real wheel file (zip, dist-info,
RECORD) that pip installs from a --find-links folder, so no index is needed."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes],
               requires: tuple[str, ...] = ()) -> Path:
    """``folder/<name>-<version>-py3-none-any.whl`` holding ``files`` and a dist-info whose
    METADATA lists ``requires`` as Requires-Dist."""
    dist = f"{name.replace('-', '_')}-{version}"
    metadata = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                          *(f"Requires-Dist: {line}" for line in requires)]) + "\n"
    wheel_file = ("Wheel-Version: 1.0\nGenerator: fasdl-tests\nRoot-Is-Purelib: true\n"
                  "Tag: py3-none-any\n")
    members = {**files, f"{dist}.dist-info/METADATA": metadata.encode(),
               f"{dist}.dist-info/WHEEL": wheel_file.encode()}
    record = [_record_line(member, data) for member, data in members.items()]
    record.append(f"{dist}.dist-info/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
        archive.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return path
