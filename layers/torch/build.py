#!/usr/bin/env python3
"""Build the torch Lambda layer: a stripped torch CPU tree packed as torch.tar.zst.

torch 2.13 CPU is ~400 MB even stripped, over Lambda's 250 MB unzipped limit, so the layer
ships the compressed tree plus `zstandard` and `fasdl_torch_loader`, which unpacks it to /tmp
at cold start. See layers/torch/README.md for the layout and what is stripped.

    python layers/torch/build.py [--wheel PATH | --arch x86_64|arm64] [--level N]
                                 [--out layers/torch/dist] [--function-dir functions]
"""

from __future__ import annotations

import argparse
import compileall
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

# build.py runs as a script (and tests load it by path): make its sibling module importable.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_deps import RUNTIME_DEPS, install_runtime_deps

HERE = Path(__file__).resolve().parent
LIMIT = 262_144_000  # Lambda: function code + all layers, unzipped
TORCH_VERSION = "2.13.0"
ZSTANDARD_VERSION = "0.25.0"
ARCHIVE = "torch.tar.zst"
LOADER = HERE / "loader" / "fasdl_torch_loader.py"
MACHINE = {"x86_64": "x86_64", "arm64": "aarch64"}
TORCH_PLATFORM = {"x86_64": "manylinux_2_28_x86_64", "arm64": "manylinux_2_28_aarch64"}
# The layer's loader itself needs zstandard for the function's architecture.
ZSTD_PLATFORMS = {
    "x86_64": ["manylinux2014_x86_64", "manylinux_2_17_x86_64"],
    "arm64": ["manylinux2014_aarch64", "manylinux_2_17_aarch64"],
}
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

_T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - _T0:6.1f}s] {msg}", flush=True)


def die(msg: str, code: int = 2) -> NoReturn:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def tree_bytes(root: Path) -> int:
    """Apparent size, as Lambda counts it (sum of file sizes, unzipped)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def pip_download(spec: str, platforms: list[str], dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.11", "--implementation", "cp", "-d", str(dest)]
    for plat in platforms:
        cmd += ["--platform", plat]
    log(f"pip download {spec} ({', '.join(platforms)})")
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
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        if any(n.startswith("torch/lib/libtorch_cuda") for n in names):
            die(f"{wheel.name} is a CUDA build; pass the CPU wheel with --wheel")
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


def precompile(stage: Path, arch: str) -> str:
    """Leave .pyc files in the tree: a cold import without them costs ~4 s more."""
    if sys.version_info[:2] != (3, 11):
        log("warning: not Python 3.11, so no .pyc files (Lambda would compile at import)")
        return "none"
    if MACHINE[arch] != platform.machine():
        # Can't run an aarch64 torch here; bytecode is arch-independent, so compile it all.
        log("cross build: compiling every module to .pyc")
        compileall.compile_dir(stage, quiet=1, workers=0)
        return "all"
    log("smoke test: import torch and train from the staged tree, without site-packages")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", SMOKE, str(stage)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        die(f"the stripped torch tree failed the smoke test:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["outside"]:
        die(f"smoke test imported modules from outside the tree: {result['outside']}")
    log(f"smoke test ok: torch {result['torch']}, loss {result['loss']:.3f}")
    return "used"


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
    total = tree_bytes(stage)
    nfiles = sum(1 for p in entries if not p.is_dir())
    log(f"packing {nfiles} files ({mb(total)}) at zstd -{level}, {os.cpu_count()} threads")
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
    return nfiles, total


def layer_python(out: Path, arch: str, work: Path) -> None:
    """out/python: the loader plus zstandard for the function's architecture."""
    py = out / "python"
    py.mkdir(parents=True)
    shutil.copy2(LOADER, py / LOADER.name)
    # Only the C backend: the cffi one needs _cffi_backend, which Lambda's Python lacks.
    skip = shutil.ignore_patterns("__pycache__", "_cffi*.so")
    if MACHINE[arch] == platform.machine():
        spec = importlib.util.find_spec("zstandard")
        assert spec is not None and spec.submodule_search_locations
        have = importlib.metadata.version("zstandard")
        if have != ZSTANDARD_VERSION:
            log(f"warning: zstandard {have} installed, {ZSTANDARD_VERSION} expected")
        shutil.copytree(next(iter(spec.submodule_search_locations)), py / "zstandard",
                        ignore=skip)
    else:
        wheel = pip_download(f"zstandard=={ZSTANDARD_VERSION}", ZSTD_PLATFORMS[arch], work)
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(work / "zst", [n for n in zf.namelist() if n.startswith("zstandard/")])
        shutil.copytree(work / "zst" / "zstandard", py / "zstandard", ignore=skip)
    # The wheels' backend_c carries debug info: 11 MB, under 1 MB stripped.
    strip_libs(py / "zstandard", arch)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Build the torch Lambda layer (torch.tar.zst).")
    p.add_argument("--wheel", type=Path, help="a local torch CPU wheel (default: pip download)")
    p.add_argument("--arch", choices=sorted(MACHINE), default=None,
                   help="function architecture (default: from --wheel, else this machine)")
    p.add_argument("--level", type=int, default=19, help="zstd level (default 19; 3 is fast)")
    p.add_argument("--out", type=Path, default=HERE / "dist", help="layer asset directory")
    p.add_argument("--function-dir", type=Path, default=None,
                   help="function code dir counted with the layer against the 250 MB limit")
    args = p.parse_args(argv)
    host = "arm64" if platform.machine() == "aarch64" else "x86_64"
    wheel_arch = None
    if args.wheel is not None:
        wheel_arch = "arm64" if "aarch64" in args.wheel.name else "x86_64"
    if args.arch and wheel_arch and args.arch != wheel_arch:
        p.error(f"--arch {args.arch} does not match the {wheel_arch} wheel {args.wheel.name}")
    args.arch = args.arch or wheel_arch or host
    if not 1 <= args.level <= 22:
        p.error("--level must be 1..22")
    return args


def build(args: argparse.Namespace, work: Path) -> int:
    out: Path = args.out.resolve()
    for old in (out / "python", out / ARCHIVE, out / f"{ARCHIVE}.json", out / f"{ARCHIVE}.part"):
        if old.is_dir():
            shutil.rmtree(old)
        elif old.exists():
            old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    wheel = args.wheel or pip_download(f"torch=={TORCH_VERSION}", [TORCH_PLATFORM[args.arch]], work)
    if not wheel.is_file():
        die(f"no wheel at {wheel}")
    log(f"wheel {wheel.name} ({mb(wheel.stat().st_size)}), arch {args.arch}")
    stage = work / "stage"
    dropped: dict[str, int] = {}
    version = stage_wheel(wheel, stage, dropped)
    versions = copy_deps(stage)
    dropped["strip --strip-unneeded"] = strip_libs(stage, args.arch)
    normalize_mtimes(stage)
    pyc = precompile(stage, args.arch)
    nfiles, unpacked = pack(stage, out / ARCHIVE, args.level)
    layer_python(out, args.arch, work)
    log(f"runtime deps for {args.arch}: {', '.join(RUNTIME_DEPS)}")
    runtime = install_runtime_deps(out / "python", args.arch)

    data = (out / ARCHIVE).read_bytes()
    manifest = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "archive_bytes": len(data),
        "unpacked_bytes": unpacked,
        "files": nfiles,
        "torch_version": version,
        "arch": args.arch,
        "python": "cp311",
        "zstd_level": args.level,
        "pyc": pyc,
        "deps": versions,
        "runtime_deps": runtime,
    }
    (out / f"{ARCHIVE}.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print("\nsummary")
    print(f"  torch {version} ({args.arch}), zstd -{args.level}, pyc: {pyc}, "
          f"{time.monotonic() - _T0:.1f} s")
    for reason, n in sorted(dropped.items(), key=lambda kv: -kv[1]):
        print(f"  removed {mb(n):>12}  {reason}")
    print(f"  unpacked tree    {mb(unpacked):>12}  ({nfiles} files, goes to /tmp)")
    print(f"  {ARCHIVE}    {mb(len(data)):>12}")
    check_limit(out, args.function_dir)
    return 0


def check_limit(layer_dir: Path, function_dir: Path | None) -> int:
    """Print the unzipped sizes; exit 3 if function + layer pass Lambda's limit."""
    layer = tree_bytes(layer_dir)
    function = tree_bytes(function_dir) if function_dir else 0
    total = layer + function
    print(f"  layer dir        {mb(layer):>12}  {layer_dir}")
    if function_dir:
        print(f"  function dir     {mb(function):>12}  {function_dir}")
    print(f"  total unzipped   {mb(total):>12}  of {mb(LIMIT)} allowed", flush=True)
    if total > LIMIT:
        die(f"function code + layer is {total:,} bytes unzipped, over Lambda's limit of "
            f"{LIMIT:,}; raise --level, strip more or shrink the function", code=3)
    return total


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fasdl-torch-layer-") as tmp:
        return build(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
