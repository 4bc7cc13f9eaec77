"""Unpack the torch archive shipped in the Lambda layer into /tmp, once per sandbox.

torch 2.13 CPU is ~400 MB even stripped, over the 250 MB unzipped layer limit, so the
layer carries `torch.tar.zst` and this module unpacks it at cold start.

Usage in a handler module (at import time, before `import torch`):

    import fasdl_torch_loader
    fasdl_torch_loader.ensure_torch()
    import torch

Only the stdlib and `zstandard` (shipped next to this file) may be imported here.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import sys
import tarfile
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

ARCHIVE_NAME = "torch.tar.zst"
ARCHIVE_ENV = "FASDL_TORCH_ARCHIVE"
DEFAULT_TARGET = "/tmp/fasdl-torch"
MARKER = ".fasdl-torch-complete"
# zstd frames can be large; bigger reads cut per-call overhead in the decompressor.
_READ_SIZE = 1 << 20

log = logging.getLogger("fasdl.torch_loader")


@dataclass(frozen=True)
class LoadResult:
    target: str
    # "reused": a complete tree was already there; "installed": our unpack won the rename;
    # "discarded": a concurrent cold start installed first, so ours was thrown away.
    outcome: str
    seconds: float
    sha256: str


last_result: LoadResult | None = None


def find_archive() -> str:
    """The archive: $FASDL_TORCH_ARCHIVE, else next to this file, else one level up.

    A layer unpacks under /opt, with this file at /opt/python/, the archive at /opt/.
    """
    env = os.environ.get(ARCHIVE_ENV)
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError(f"{ARCHIVE_ENV}={env} does not exist")
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in (here, os.path.dirname(here)):
        cand = os.path.join(folder, ARCHIVE_NAME)
        if os.path.isfile(cand):
            return cand
    raise FileNotFoundError(f"{ARCHIVE_NAME} not found next to {here} or above; set {ARCHIVE_ENV}")


def read_manifest(archive: str) -> dict[str, Any]:
    """The build's manifest (`<archive>.json`); without one, hash the archive (slower)."""
    path = archive + ".json"
    size = os.path.getsize(archive)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            manifest: dict[str, Any] = json.load(fh)
        # A cheap guard against an archive and manifest from different builds.
        if manifest.get("archive_bytes") != size:
            raise RuntimeError(
                f"{archive} is {size} bytes but its manifest says {manifest.get('archive_bytes')}"
            )
        return manifest
    log.warning("no manifest at %s; hashing the archive to identify it", path)
    digest = hashlib.sha256()
    with open(archive, "rb") as fh:
        while chunk := fh.read(_READ_SIZE):
            digest.update(chunk)
    return {"sha256": digest.hexdigest(), "archive_bytes": size}


def read_marker(target: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(target, MARKER), encoding="utf-8") as fh:
            data: dict[str, Any] = json.load(fh)
            return data
    except (OSError, ValueError):
        return None


def is_complete(target: str, sha256: str) -> bool:
    """True only for a tree whose marker names this archive (the marker is written last)."""
    marker = read_marker(target)
    return marker is not None and marker.get("sha256") == sha256


def ensure_torch(target: str = DEFAULT_TARGET, archive: str | None = None) -> str:
    """Make `import torch` work: unpack if needed, put `target` on sys.path, return it."""
    global last_result
    start = time.monotonic()
    archive = archive or find_archive()
    manifest = read_manifest(archive)
    sha = str(manifest["sha256"])
    outcome = "reused" if is_complete(target, sha) else _unpack(archive, target, manifest)
    seconds = time.monotonic() - start
    last_result = LoadResult(target, outcome, seconds, sha)
    log.info("torch tree %s at %s in %.2f s", outcome, target, seconds)
    _add_to_path(target)
    return target


def _unpack(archive: str, target: str, manifest: dict[str, Any]) -> str:
    parent = os.path.dirname(os.path.abspath(target)) or "."
    os.makedirs(parent, exist_ok=True)
    _remove_orphans(target)
    need = int(manifest.get("unpacked_bytes", 0))
    free = shutil.disk_usage(parent).free
    if need and free < need:
        raise OSError(
            errno.ENOSPC,
            f"torch needs {need / 1e6:.0f} MB in {parent} but only {free / 1e6:.0f} MB are free; "
            "raise the function's ephemeral storage",
        )
    tmp = f"{target}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.mkdir(tmp)
    try:
        t0 = time.monotonic()
        _extract(archive, tmp)
        marker = {k: manifest.get(k) for k in ("sha256", "torch_version", "files")}
        with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as fh:
            json.dump(marker, fh)
        log.info("unpacked %s in %.2f s", archive, time.monotonic() - t0)
        return _install(tmp, target, str(manifest["sha256"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _extract(archive: str, dest: str) -> None:
    import zstandard  # the layer ships it; imported late so `find_archive` works without it

    dctx = zstandard.ZstdDecompressor()
    with (
        open(archive, "rb") as raw,
        dctx.stream_reader(raw, read_size=_READ_SIZE, read_across_frames=True) as stream,
        tarfile.open(fileobj=stream, mode="r|") as tar,
    ):
        if hasattr(tarfile, "data_filter"):
            # The "data" filter refuses absolute paths and links leaving dest.
            tar.extractall(dest, filter="data")
        else:  # Python < 3.11.4
            tar.extractall(dest)
        # Read to the frame's end so zstd checks its content checksum (corrupt layer file).
        while stream.read(_READ_SIZE):
            pass


def _install(tmp: str, target: str, sha: str) -> str:
    """Atomically move the finished tree into place; a rename never exposes a partial tree."""
    for _ in range(5):
        try:
            os.rename(tmp, target)
            return "installed"
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        if is_complete(target, sha):
            return "discarded"  # a concurrent cold start won; ours is removed by the caller
        # A stale (other archive) or marker-less tree: move it aside, then retry the rename.
        aside = f"{target}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(target, aside)
        except FileNotFoundError:
            continue
        shutil.rmtree(aside, ignore_errors=True)
    raise RuntimeError(f"could not install the torch tree at {target}")


def _remove_orphans(target: str) -> None:
    """Delete temp/aside trees left by dead processes (e.g. a cold start that timed out)."""
    parent = os.path.dirname(os.path.abspath(target))
    base = os.path.basename(target)
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        for kind in (".tmp-", ".old-"):
            prefix = base + kind
            if not name.startswith(prefix):
                continue
            pid = name[len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _add_to_path(target: str) -> None:
    import importlib

    if target not in sys.path:
        # First, so the archive's torch and its pinned deps win over anything else.
        sys.path.insert(0, target)
    # A finder cached while the directory did not exist would hide it.
    sys.path_importer_cache.pop(target, None)
    importlib.invalidate_caches()


def main(argv: list[str] | None = None) -> int:
    """`python fasdl_torch_loader.py [--target DIR] [--archive FILE]`: unpack, print JSON."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--archive", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    ensure_torch(args.target, args.archive)
    assert last_result is not None
    print(json.dumps(asdict(last_result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
