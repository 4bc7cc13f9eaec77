#!/usr/bin/env python3
"""Build the torch Lambda layer: a stripped torch CPU tree packed as torch.tar.zst.

torch 2.13 CPU is ~400 MB even stripped, over Lambda's 250 MB unzipped limit, so the layer
ships the compressed tree plus `zstandard` and `fasdl_torch_loader`, which unpacks it to /tmp
at cold start. Everything is built for infra.lambda_runtime's target (python3.12 on Amazon
Linux 2023), never for this machine by accident, and the result is scanned for Lambda
compatibility (lambda_scan.py). See layers/torch/README.md.

    python layers/torch/build.py [--wheel PATH] [--arch x86_64|arm64] [--level N]
        [--out layers/torch/dist] [--function-dir functions] [--torch-index-url URL]
        [--target-python PATH] [--python-override X.Y (tests only)]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import IO, NoReturn

import zstandard

# build.py runs as a script (and tests load it by path): make its sibling modules, the
# repository's infra/ and the runtime's contract (functions/fasdl/contract) importable.
HERE = Path(__file__).resolve().parent
sys.path[:0] = [p for p in (str(HERE), str(HERE.parents[1]), str(HERE.parents[1] / "functions"))
                if p not in sys.path]
from lambda_scan import ARCHIVE, LIMIT, Report, scan, summary  # noqa: E402
from runtime_deps import install_runtime_deps, read_requirements  # noqa: E402
from target_python import NO_PYC_COST, find_target_python, precompile  # noqa: E402
from target_wheel import (  # noqa: E402
    DEFAULT_TORCH_INDEX,
    TORCH_VERSION,
    TargetMismatch,
    check_wheel,
    download_torch,
    manylinux_platforms,
)

from infra.lambda_runtime import (  # noqa: E402
    PYTHON_RUNTIME,
    LambdaTarget,
    lambda_target,
    tree_bytes,
)

ZSTANDARD_VERSION = "0.25.0"
LOADER = HERE / "loader" / "fasdl_torch_loader.py"
MACHINE = {"x86_64": "x86_64", "arm64": "aarch64"}
# From the wheel: torch, functorch (a shim) and torchgen (torch.utils._python_dispatch imports it).
WHEEL_TOPS = ("torch/", "functorch/", "torchgen/", f"torch-{TORCH_VERSION}")
# Pure-python modules torch imports for eager training, found by running SMOKE with a bare
# sys.path: typing_extensions at `import torch`; sympy (+ mpmath) because every optimizer's
# __init__ imports torch._dynamo. filelock, fsspec, jinja2, networkx are not needed.
DEPS = ("typing_extensions", "sympy", "mpmath")
KEEP_BIN = {"torch_shm_manager"}  # spawned by torch.multiprocessing's file_descriptor sharing
TEST_LIBS = {"libjitbackend_test.so", "libtorchbind_test.so", "libbackend_with_compiler.so",
             "libaoti_custom_ops.so"}
EPOCH = 1_700_000_000  # fixed mtime for every file, so the .pyc files stay valid once unpacked

_T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - _T0:6.1f}s] {msg}", flush=True)


def die(msg: str, code: int = 2) -> NoReturn:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def pip_download(spec: str, target: LambdaTarget, dest: Path) -> Path:
    """One wheel for the target's CPython ABI and any manylinux its OS can load."""
    platforms = manylinux_platforms(target)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", target.python_version, "--implementation", "cp",
           "--abi", target.abi, "-d", str(dest)]
    for plat in platforms:
        cmd += ["--platform", plat]
    log(f"pip download {spec} for {target.describe()}")
    subprocess.run([*cmd, spec], check=True)
    name = spec.split("==")[0]
    wheels = sorted(dest.glob(f"{name}-*.whl"))
    if not wheels:
        die(f"pip download {spec} left no wheel in {dest}")
    return wheels[-1]


def drop_reason(rel: str) -> str | None:
    """Why a wheel member is left out of the layer, or None to keep it."""
    parts = rel.split("/")
    if any(p in ("test", "tests") for p in parts[:-1]):
        return "test/ and tests/ dirs"
    if "__pycache__" in parts:
        return "__pycache__"
    if rel.startswith("torch/include/"):
        return "torch/include (C++ headers)"
    if rel.startswith("torch/share/cmake/"):
        return "torch/share/cmake"
    if rel.endswith(".a"):
        return "static libs (*.a)"
    if rel.startswith("torch/bin/") and parts[2] not in KEEP_BIN:
        return "torch/bin tools and C++ tests"
    if rel.startswith("torch/lib/") and parts[-1] in TEST_LIBS:
        return "test .so libs"
    if rel.endswith(".dist-info/RECORD"):
        return "dist-info RECORD"
    return None


def stage_wheel(wheel: Path, stage: Path, dropped: dict[str, int]) -> str:
    """Unzip the kept members; returns the wheel's torch version."""
    with zipfile.ZipFile(wheel) as zf:  # check_wheel has refused CUDA builds already
        names = zf.namelist()
        kept = 0
        for info in zf.infolist():
            if info.is_dir() or not info.filename.startswith(WHEEL_TOPS):
                continue
            reason = drop_reason(info.filename)
            if reason:
                dropped[reason] = dropped.get(reason, 0) + info.file_size
                continue
            path = Path(zf.extract(info, stage))
            mode = (info.external_attr >> 16) & 0o777
            path.chmod(mode or 0o644)
            kept += 1
        log(f"unzipped {kept} of {len(names)} wheel members")
    for line in (stage / "torch" / "version.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("'\"")
    return "unknown"


def copy_deps(stage: Path) -> dict[str, str]:
    """Copy torch's pure-python import-time deps from this interpreter's site-packages."""
    versions = {}
    for name in DEPS:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            die(f"{name} is not installed in {sys.executable}; `pip install {name}`")
        locations = spec.submodule_search_locations
        if locations:
            src = Path(next(iter(locations)))
            skip = shutil.ignore_patterns("test", "tests", "__pycache__")  # sympy: 35 MB of tests
            shutil.copytree(src, stage / name, ignore=skip)
        else:
            shutil.copy2(spec.origin, stage / Path(spec.origin).name)
        versions[name] = importlib.metadata.version(name.replace("_", "-"))
    log(f"copied deps: {', '.join(f'{k} {v}' for k, v in versions.items())}")
    return versions


def strip_tool(arch: str) -> str | None:
    cands = ["strip"] if MACHINE[arch] == platform.machine() else []
    if arch == "arm64":
        cands += ["aarch64-linux-gnu-strip", "llvm-strip"]
    else:
        cands += ["x86_64-linux-gnu-strip", "llvm-strip"]
    return next((c for c in cands if shutil.which(c)), None)


def strip_libs(root: Path, arch: str) -> int:
    """`strip --strip-unneeded` every shared library under root; returns bytes saved."""
    libs = [p for p in root.rglob("*.so*") if p.is_file() and _is_elf(p)]
    tool = strip_tool(arch)
    if tool is None:
        log(f"warning: no strip tool for {arch}; shared libraries stay unstripped")
        return 0
    before = sum(p.stat().st_size for p in libs)
    subprocess.run([tool, "--strip-unneeded", *map(str, libs)], check=True)
    saved = before - sum(p.stat().st_size for p in libs)
    log(f"{tool} --strip-unneeded on {len(libs)} libraries: -{mb(saved)}")
    return saved


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def normalize_mtimes(root: Path) -> None:
    for dirpath, dirs, files in os.walk(root):
        for name in [*files, *dirs]:
            os.utime(os.path.join(dirpath, name), (EPOCH, EPOCH), follow_symlinks=False)
    os.utime(root, (EPOCH, EPOCH))


class _Progress:
    """File wrapper that reports how much of the tree has gone into the compressor."""

    def __init__(self, sink: IO[bytes], total: int) -> None:
        self.sink, self.total, self.done, self.next = sink, max(total, 1), 0, 0.0

    def write(self, data: bytes) -> int:
        self.done += len(data)
        if self.done / self.total >= self.next:
            log(f"  packed {100 * self.done / self.total:3.0f}% ({mb(self.done)})")
            self.next += 0.1
        return self.sink.write(data)


def pack(stage: Path, dest: Path, level: int) -> tuple[int, int]:
    """Write the tree as a deterministic tar, zstd-compressed; returns (files, bytes)."""
    entries: list[Path] = []
    for dirpath, dirs, files in os.walk(stage):
        dirs.sort()
        entries += [Path(dirpath, d) for d in dirs] + [Path(dirpath, f) for f in sorted(files)]
    members = [p for p in entries if not p.is_dir()]
    total = sum(p.lstat().st_size for p in members)  # the tar's bytes, .pyc too: progress only
    log(f"packing {len(members)} files ({mb(total)}) at zstd -{level}, {os.cpu_count()} threads")
    cctx = zstandard.ZstdCompressor(level=level, threads=-1, write_checksum=True)
    part = dest.with_name(dest.name + ".part")
    with (
        open(part, "wb") as fh,
        cctx.stream_writer(fh, closefd=False) as zw,
        tarfile.open(fileobj=_Progress(zw, total), mode="w|") as tar,  # type: ignore[call-overload]
    ):
        for path in entries:
            info = tar.gettarinfo(str(path), arcname=path.relative_to(stage).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = EPOCH
            if info.isreg():
                with open(path, "rb") as src:
                    tar.addfile(info, src)
            else:
                tar.addfile(info)
    part.replace(dest)
    return len(members), total


def layer_python(out: Path, target: LambdaTarget, work: Path) -> None:
    """out/python: the loader plus zstandard for the target's ABI and architecture."""
    py = out / "python"
    py.mkdir(parents=True)
    shutil.copy2(LOADER, py / LOADER.name)
    # Only the C backend: the cffi one needs _cffi_backend, which Lambda's Python lacks.
    skip = shutil.ignore_patterns("__pycache__", "_cffi*.so")
    here = (f"cp{sys.version_info[0]}{sys.version_info[1]}", platform.machine())
    if here == (target.abi, target.machine):
        spec = importlib.util.find_spec("zstandard")
        assert spec is not None and spec.submodule_search_locations
        have = importlib.metadata.version("zstandard")
        if have != ZSTANDARD_VERSION:
            log(f"warning: zstandard {have} installed, {ZSTANDARD_VERSION} expected")
        shutil.copytree(next(iter(spec.submodule_search_locations)), py / "zstandard",
                        ignore=skip)
    else:  # this interpreter's zstandard is another ABI or arch: fetch the target's wheel
        wheel = pip_download(f"zstandard=={ZSTANDARD_VERSION}", target, work)
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(work / "zst", [n for n in zf.namelist() if n.startswith("zstandard/")])
        shutil.copytree(work / "zst" / "zstandard", py / "zstandard", ignore=skip)
    # The wheels' backend_c carries debug info: 11 MB, under 1 MB stripped.
    strip_libs(py / "zstandard", target.arch)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Build the torch Lambda layer (torch.tar.zst).")
    p.add_argument("--wheel", type=Path, help="a local torch CPU wheel (default: pip download)")
    p.add_argument("--arch", choices=sorted(MACHINE), default=None,
                   help="function architecture (default: from --wheel, else this machine)")
    p.add_argument("--level", type=int, default=19, help="zstd level (default 19; 3 is fast)")
    p.add_argument("--out", type=Path, default=HERE / "dist", help="layer asset directory")
    p.add_argument("--function-dir", type=Path, default=None,
                   help="function code dir counted with the layer against the 250 MB limit")
    p.add_argument("--torch-index-url", default=os.environ.get("TORCH_INDEX_URL")
                   or DEFAULT_TORCH_INDEX,
                   help="where pip downloads torch without --wheel (default: $TORCH_INDEX_URL, "
                        f"else {DEFAULT_TORCH_INDEX})")
    p.add_argument("--target-python", type=Path, default=None,
                   help="a Python of the target's version for .pyc files and the smoke test "
                        "(default: python3.X on PATH, then ~/.pyenv/versions/3.X*)")
    p.add_argument("--python-override", metavar="X.Y", default=None,
                   help="for tests only: keeps the runtime's OS, changes the CPython ABI")
    args = p.parse_args(argv)
    host = "arm64" if platform.machine() == "aarch64" else "x86_64"
    wheel_arch = None
    if args.wheel is not None:
        wheel_arch = "arm64" if "aarch64" in args.wheel.name else "x86_64"
    args.arch = args.arch or wheel_arch or host  # a mismatch is check_wheel's to explain
    if not 1 <= args.level <= 22:
        p.error("--level must be 1..22")
    try:
        args.target = lambda_target(args.arch, PYTHON_RUNTIME,
                                    python_override=args.python_override)
    except ValueError as error:
        p.error(str(error))
    return args


def resolve_inputs(args: argparse.Namespace, work: Path) -> tuple[Path, str | None]:
    """The torch wheel and the target's interpreter, both checked before anything is staged."""
    target: LambdaTarget = args.target
    log(f"target {target.describe()}")
    try:
        wheel = args.wheel or download_torch(target, args.torch_index_url, work)
        tag = check_wheel(wheel, target, args.torch_index_url)
        python = find_target_python(target, args.target_python)
    except TargetMismatch as error:
        die(str(error))
    log(f"wheel {wheel.name} ({mb(wheel.stat().st_size)}, {tag})")
    return wheel, python


def build(args: argparse.Namespace, work: Path) -> int:
    target: LambdaTarget = args.target
    wheel, python = resolve_inputs(args, work)
    out: Path = args.out.resolve()
    for old in (out / "python", out / ARCHIVE, out / f"{ARCHIVE}.json", out / f"{ARCHIVE}.part"):
        if old.is_dir():
            shutil.rmtree(old)
        elif old.exists():
            old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    stage = work / "stage"
    dropped: dict[str, int] = {}
    version = stage_wheel(wheel, stage, dropped)
    versions = copy_deps(stage)
    dropped["strip --strip-unneeded"] = strip_libs(stage, target.arch)
    normalize_mtimes(stage)
    try:
        pyc = precompile(stage, target, python, log)
    except RuntimeError as error:
        die(str(error))
    nfiles, unpacked = pack(stage, out / ARCHIVE, args.level)
    layer_python(out, target, work)
    log(f"runtime deps for {target.describe()}: {', '.join(read_requirements())}")
    runtime = install_runtime_deps(out / "python", target)

    data = (out / ARCHIVE).read_bytes()
    manifest = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "archive_bytes": len(data),
        "unpacked_bytes": unpacked,
        "files": nfiles,
        "torch_version": version,
        "arch": target.arch,
        "runtime": target.runtime,
        "python": target.abi,
        "glibc": ".".join(map(str, target.os.glibc)),
        "zstd_level": args.level,
        "pyc": pyc,
        "deps": versions,
        "runtime_deps": runtime,
    }
    (out / f"{ARCHIVE}.json").write_text(json.dumps(manifest, indent=2) + "\n")
    log("Lambda compatibility scan of the layer")
    report = scan(out, target, args.function_dir, progress=log)
    print_summary(args, version, pyc, dropped, unpacked, nfiles, len(data), report)
    if not report.ok:
        die(f"the layer is not compatible with {target.describe()}: "
            f"{len(report.findings)} findings ({', '.join(sorted(report.rules()))}) above",
            code=3)
    return 0


def print_summary(args: argparse.Namespace, version: str, pyc: str, dropped: dict[str, int],
                  unpacked: int, nfiles: int, archive: int, report: Report) -> None:
    print(f"\nsummary\n  torch {version} for {args.target.describe()}, zstd -{args.level}, "
          f"pyc: {pyc}, {time.monotonic() - _T0:.1f} s")
    for reason, n in sorted(dropped.items(), key=lambda kv: -kv[1]):
        print(f"  removed {mb(n):>12}  {reason}")
    print(f"  unpacked tree    {mb(unpacked):>12}  ({nfiles} files, goes to /tmp)\n"
          f"  {ARCHIVE}    {mb(archive):>12}")
    if pyc == "none":
        print(f"  WARNING: no .pyc files for Python {args.target.python_version}: {NO_PYC_COST}")
    layer = tree_bytes(args.out)
    print(f"  layer dir        {mb(layer):>12}  {args.out}")
    if args.function_dir:
        print(f"  function dir     {mb(report.total_bytes - layer):>12}  {args.function_dir}")
    print(f"  total unzipped   {mb(report.total_bytes):>12}  of {mb(LIMIT)} allowed")
    print(summary(report), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fasdl-torch-layer-") as tmp:
        return build(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
