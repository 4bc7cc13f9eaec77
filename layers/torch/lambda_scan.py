#!/usr/bin/env python3
"""Lambda compatibility scan of a built torch layer: will every native file load there?

It streams ``torch.tar.zst`` (and opens every zip/wheel) in the layer, reads every ELF file
with pyelftools and checks it against the Lambda target of infra.lambda_runtime:

- ``glibc``: the newest GLIBC_x.y symbol version it needs <= the target OS's glibc;
- ``glibcxx``: the newest GLIBCXX_ version <= the OS's libstdc++ (when known);
- ``machine``: its ELF machine is the function's architecture;
- ``abi-tag``: an extension module's file name tag (``.cpython-312-x86_64-linux-gnu.so``) is
  the target's Python and architecture (``.abi3.so`` fits any);
- ``cuda``: no CUDA/cuDNN/NCCL library, by name or as a DT_NEEDED entry;
- ``size-limit``: layer + function code <= 262,144,000 bytes unzipped (apparent sizes);
- ``tmp-reserve``: the unpacked torch tree fits the /tmp the stack reserves for it.

    python layers/torch/lambda_scan.py LAYER_DIR --arch x86_64|arm64 [--runtime python3.12]
        [--python-override 3.11] [--function-dir functions]

Exit status: 0 compatible, 3 findings, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

import zstandard
from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: infra/ is two folders up
    sys.path.insert(0, str(ROOT))
from infra.lambda_runtime import (  # noqa: E402
    ARCH_MACHINE,
    PYTHON_RUNTIME,
    RUNTIME_OS,
    TORCH_TMP_RESERVE_MB,
    UNZIPPED_CODE_LIMIT,
    LambdaTarget,
    lambda_target,
    tree_bytes,
)

LIMIT = UNZIPPED_CODE_LIMIT  # Lambda: function code + all layers, unzipped

ARCHIVE = "torch.tar.zst"
MANIFEST = "torch.tar.zst.json"
ELF_MACHINE = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}
# Any of these means a CUDA build: GBs that Lambda cannot use.
CUDA_PREFIXES = ("libtorch_cuda", "libc10_cuda", "libcaffe2_nvrtc", "libcudart", "libcublas",
                 "libcudnn", "libnccl", "libcufft", "libcurand", "libcusparse", "libcusolver",
                 "libnvrtc", "libnvJitLink", "libnvToolsExt", "libcupti")
_EXTENSION = re.compile(r"\.cpython-(\d)(\d+)-(\w+)-linux-gnu\.so$")
_SPOOL = 128 * 2**20  # ELF members larger than this go to a temp file, not memory
Version = tuple[int, ...]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Finding:
    file: str
    rule: str
    detail: str


@dataclass(frozen=True)
class ElfInfo:
    """What a target needs to know about one ELF file."""

    file: str  # layer-relative; archive members as "torch.tar.zst:torch/lib/x.so"
    machine: str  # x86_64, aarch64 or the raw e_machine
    needs: dict[str, Version]  # newest version needed per prefix: GLIBC, GLIBCXX, CXXABI
    needed: tuple[str, ...]  # DT_NEEDED


@dataclass
class Inventory:
    """The target-independent part of a scan (the slow part)."""

    elves: list[ElfInfo] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # every file seen, archive members too
    unreadable: list[Finding] = field(default_factory=list)
    layer_bytes: int = 0
    function_bytes: int = 0
    other_layers_bytes: int = 0  # the function's other layers, counted against the limit too
    unpacked_bytes: int | None = None  # the torch tree in /tmp (manifest, else the tar)
    seconds: float = 0.0


@dataclass
class Report:
    target: LambdaTarget
    findings: list[Finding]
    max_glibc: Version | None
    max_glibc_file: str | None
    max_glibcxx: Version | None
    max_glibcxx_file: str | None
    files: int
    elf_files: int
    extension_modules: int
    total_bytes: int
    unpacked_bytes: int | None
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.findings

    def rules(self) -> set[str]:
        return {f.rule for f in self.findings}


def is_cuda_library(name: str) -> bool:
    """``libcudart.so.12`` and friends, by file name (also DT_NEEDED entries)."""
    base = name.rsplit("/", 1)[-1]
    return base.startswith(CUDA_PREFIXES) and ".so" in base


def vstr(version: Version | None) -> str:
    return ".".join(map(str, version)) if version else "-"


# --- reading: the layer's files, archive members and zip members ---------------------------


def read_elf(label: str, stream: IO[bytes]) -> ElfInfo:
    """Symbol versions needed, DT_NEEDED and machine of one ELF (a seekable stream)."""
    elf = ELFFile(stream)
    needs: dict[str, Version] = {}
    needed: list[str] = []
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for _verneed, auxes in section.iter_versions():
                for aux in auxes:
                    prefix, _, number = str(aux.name).partition("_")
                    if re.fullmatch(r"\d+(\.\d+)*", number):
                        version = tuple(int(x) for x in number.split("."))
                        needs[prefix] = max(needs.get(prefix, ()), version)
        elif isinstance(section, DynamicSection):
            needed += [str(tag.needed)  # type: ignore[attr-defined]  # set per tag type
                       for tag in section.iter_tags("DT_NEEDED")]
    machine = str(elf["e_machine"])
    return ElfInfo(label, ELF_MACHINE.get(machine, machine), needs, tuple(needed))


def _inspect(label: str, stream: IO[bytes], inv: Inventory, seekable: bool = False) -> None:
    """Record one file; ELF files are parsed, zips opened. Archive streams are copied first."""
    inv.names.append(label)
    head = stream.read(4)
    if head not in (b"\x7fELF", b"PK\x03\x04"):
        return
    if seekable:
        stream.seek(0)
        _parse(label, head, stream, inv)
        return
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as copy:
        copy.write(head)
        shutil.copyfileobj(stream, copy, 2**20)
        copy.seek(0)
        _parse(label, head, copy, inv)


def _parse(label: str, head: bytes, stream: IO[bytes], inv: Inventory) -> None:
    if head == b"PK\x03\x04":
        _scan_zip(label, stream, inv)
        return
    try:
        inv.elves.append(read_elf(label, stream))
    except (ELFError, ValueError, OSError) as error:  # pyelftools raises all three
        inv.unreadable.append(Finding(label, "unreadable", f"not a readable ELF: {error}"))


def _scan_zip(label: str, stream: IO[bytes], inv: Inventory) -> None:
    try:
        with zipfile.ZipFile(stream) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    with zf.open(info) as member:
                        _inspect(f"{label}:{info.filename}", member, inv)
    except zipfile.BadZipFile as error:
        inv.unreadable.append(Finding(label, "unreadable", f"not a readable zip: {error}"))


class _Counting:
    """Reports how much of the compressed archive has been read."""

    def __init__(self, raw: IO[bytes], total: int, progress: Progress | None) -> None:
        self.raw, self.total, self.done, self.next = raw, max(total, 1), 0, 0.25
        self.progress = progress

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.done += len(data)
        if self.progress and self.done / self.total >= self.next:
            self.progress(f"  scanned {100 * self.done / self.total:3.0f}% of the archive")
            self.next += 0.25
        return data


def _scan_archive(path: Path, label: str, inv: Inventory, progress: Progress | None) -> int:
    """Stream a .tar.zst member by member; returns the unpacked bytes of its regular files."""
    unpacked = 0
    with open(path, "rb") as raw:
        counting = _Counting(raw, path.stat().st_size, progress)
        reader = zstandard.ZstdDecompressor().stream_reader(cast("IO[bytes]", counting))
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            for member in tar:
                if not member.isreg():
                    continue
                unpacked += member.size
                extracted = tar.extractfile(member)
                assert extracted is not None  # regular members always have data
                _inspect(f"{label}:{member.name}", extracted, inv)
    return unpacked


def _walk(root: Path, prefix: str = "") -> Iterator[tuple[Path, str]]:
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(dirpath, name)
            if not path.is_symlink():
                yield path, prefix + path.relative_to(root).as_posix()


def inventory(layer_dir: Path, function_dir: Path | None = None,
              progress: Progress | None = None) -> Inventory:
    """Read the layer (and the function code): every ELF, archive and zip in it."""
    start = time.monotonic()
    inv = Inventory(layer_bytes=tree_bytes(layer_dir))
    trees = [(layer_dir, "")]
    if function_dir is not None:
        inv.function_bytes = tree_bytes(function_dir)
        trees.append((function_dir, f"{function_dir.name}/"))
    for root, prefix in trees:
        for path, label in _walk(root, prefix):
            if path.name.endswith(".tar.zst"):
                if progress:
                    progress(f"scanning {label} ({path.stat().st_size / 1e6:,.1f} MB)")
                unpacked = _scan_archive(path, label, inv, progress)
                if label == ARCHIVE:
                    inv.unpacked_bytes = unpacked
            else:
                with open(path, "rb") as fh:
                    _inspect(label, fh, inv, seekable=True)
    manifest = layer_dir / MANIFEST
    if manifest.is_file():  # what the loader checks /tmp against
        inv.unpacked_bytes = int(json.loads(manifest.read_text()).get("unpacked_bytes",
                                                                       inv.unpacked_bytes or 0))
    inv.seconds = time.monotonic() - start
    return inv


# --- judging: the rules against one target ------------------------------------------------


def _newest(elves: list[ElfInfo], prefix: str) -> tuple[Version | None, str | None]:
    best = max((e for e in elves if prefix in e.needs), key=lambda e: e.needs[prefix],
               default=None)
    return (best.needs[prefix], best.file) if best else (None, None)


def elf_findings(elf: ElfInfo, target: LambdaTarget) -> list[Finding]:
    """The per-file rules: glibc, glibcxx, machine, abi-tag, cuda (DT_NEEDED)."""
    found = []
    glibc, glibcxx = elf.needs.get("GLIBC"), elf.needs.get("GLIBCXX")
    if glibc and glibc > target.os.glibc:
        found.append(Finding(elf.file, "glibc", f"needs GLIBC_{vstr(glibc)}; {target.os.name} "
                                                f"has glibc {vstr(target.os.glibc)}"))
    if glibcxx and target.os.glibcxx and glibcxx > target.os.glibcxx:
        found.append(Finding(elf.file, "glibcxx", f"needs GLIBCXX_{vstr(glibcxx)}; "
                                                  f"{target.os.name}'s libstdc++ has up to "
                                                  f"GLIBCXX_{vstr(target.os.glibcxx)}"))
    if elf.machine != target.machine:
        found.append(Finding(elf.file, "machine", f"ELF machine {elf.machine}, the function is "
                                                  f"{target.arch} ({target.machine})"))
    tag = _EXTENSION.search(elf.file)
    if tag:
        python, machine = (int(tag[1]), int(tag[2])), tag[3]
        if (python, machine) != (target.python, target.machine):
            found.append(Finding(elf.file, "abi-tag", (
                f"extension module for cp{tag[1]}{tag[2]}/{machine}; {target.runtime} imports "
                f"only .cpython-{target.python[0]}{target.python[1]}-{target.machine}"
                "-linux-gnu.so or .abi3.so")))
    cuda = [n for n in elf.needed if is_cuda_library(n)]
    if cuda:
        found.append(Finding(elf.file, "cuda", f"links CUDA libraries: {', '.join(cuda)}"))
    return found


def evaluate(inv: Inventory, target: LambdaTarget) -> Report:
    """Judge an inventory against one Lambda target."""
    findings = list(inv.unreadable)
    findings += [Finding(n, "cuda", "a CUDA/cuDNN/NCCL library; the layer must be the CPU build")
                 for n in inv.names if is_cuda_library(n)]
    for elf in inv.elves:
        findings += elf_findings(elf, target)
    total = inv.layer_bytes + inv.function_bytes + inv.other_layers_bytes
    if total > LIMIT:
        findings.append(Finding("(layers + function code)", "size-limit", (
            f"{total:,} bytes unzipped, over Lambda's limit of {LIMIT:,}")))
    reserve = TORCH_TMP_RESERVE_MB * 2**20  # ephemeral storage is set in MiB
    if inv.unpacked_bytes is not None and inv.unpacked_bytes > reserve:
        findings.append(Finding(ARCHIVE, "tmp-reserve", (
            f"unpacks to {inv.unpacked_bytes:,} bytes ({inv.unpacked_bytes / 2**20:,.0f} MiB), "
            f"over the {TORCH_TMP_RESERVE_MB} MiB of /tmp the stack reserves for it "
            "(infra.lambda_runtime.TORCH_TMP_RESERVE_MB)")))
    glibc, glibc_file = _newest(inv.elves, "GLIBC")
    glibcxx, glibcxx_file = _newest(inv.elves, "GLIBCXX")
    return Report(target=target, findings=findings, max_glibc=glibc, max_glibc_file=glibc_file,
                  max_glibcxx=glibcxx, max_glibcxx_file=glibcxx_file, files=len(inv.names),
                  elf_files=len(inv.elves),
                  extension_modules=sum(1 for e in inv.elves if _is_extension(e.file)),
                  total_bytes=total, unpacked_bytes=inv.unpacked_bytes, seconds=inv.seconds)


def _is_extension(name: str) -> bool:
    return _EXTENSION.search(name) is not None or name.endswith(".abi3.so")


def scan(layer_dir: Path, target: LambdaTarget, function_dir: Path | None = None,
         progress: Progress | None = None) -> Report:
    return evaluate(inventory(layer_dir, function_dir, progress), target)


def summary(report: Report, per_rule: int = 8) -> str:
    """A readable summary: the numbers, then the findings grouped by rule."""
    os_ = report.target.os
    unpacked = report.unpacked_bytes
    lines = [
        f"Lambda compatibility scan for {report.target.describe()}",
        f"  files          {report.files:,} ({report.elf_files} ELF, "
        f"{report.extension_modules} extension modules), {report.seconds:.1f} s",
        f"  newest GLIBC   {vstr(report.max_glibc)} of {vstr(os_.glibc)} allowed  "
        f"({report.max_glibc_file or 'no ELF file'})",
        f"  newest GLIBCXX {vstr(report.max_glibcxx)} of {vstr(os_.glibcxx)} allowed  "
        f"({report.max_glibcxx_file or 'none'})",
        f"  unzipped       {report.total_bytes / 1e6:,.1f} MB of {LIMIT / 1e6:,.1f} MB allowed",
        "  /tmp tree      " + (f"{unpacked / 2**20:,.0f} MiB of {TORCH_TMP_RESERVE_MB} MiB "
                                "reserved" if unpacked is not None else "no torch archive"),
    ]
    if report.ok:
        return "\n".join([*lines, "  result         OK: compatible"])
    lines.append(f"  result         FAILED: {len(report.findings)} findings")
    for rule in sorted(report.rules()):
        hits = [f for f in report.findings if f.rule == rule]
        lines.append(f"  {rule} ({len(hits)}):")
        lines += [f"    {f.file}: {f.detail}" for f in hits[:per_rule]]
        if len(hits) > per_rule:
            lines.append(f"    ... and {len(hits) - per_rule} more")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Check a built layer against a Lambda target.")
    p.add_argument("layer_dir", type=Path, help="the layer asset directory (layers/torch/dist)")
    p.add_argument("--arch", required=True, choices=sorted(ARCH_MACHINE),
                   help="the function's architecture")
    p.add_argument("--runtime", default=PYTHON_RUNTIME, choices=list(RUNTIME_OS),
                   help=f"the Lambda runtime (default {PYTHON_RUNTIME})")
    p.add_argument("--python-override", metavar="X.Y",
                   help="for tests only: keeps the runtime's OS, changes the CPython ABI")
    p.add_argument("--function-dir", type=Path, help="function code counted against the limit")
    args = p.parse_args(argv)
    try:
        target = lambda_target(args.arch, args.runtime, python_override=args.python_override)
    except ValueError as error:
        p.error(str(error))
    for path in (args.layer_dir, args.function_dir):
        if path is not None and not path.is_dir():
            p.error(f"{path} is not a directory")
    try:
        report = scan(args.layer_dir, target, args.function_dir,
                      progress=lambda msg: print(msg, flush=True))
    except (OSError, tarfile.TarError, zstandard.ZstdError, ValueError) as error:
        print(f"error: cannot read {args.layer_dir}: {error}", file=sys.stderr)
        return 2
    print(summary(report))
    return 0 if report.ok else 3


if __name__ == "__main__":
    sys.exit(main())
