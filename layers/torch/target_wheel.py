"""What the torch layer is built for, and whether a wheel or an interpreter fits that target.

The target (CPython ABI, OS glibc, CPU architecture) comes from infra.lambda_runtime. A torch
wheel for another ABI or architecture would build a layer that cannot load on Lambda, so it is
refused before anything is staged, with the exact commands that fetch the right one.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from lambda_scan import is_cuda_library

from infra.lambda_runtime import LambdaTarget

TORCH_VERSION = "2.13.0"
DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# Oldest glibc any manylinux wheel we install may target (manylinux2014 = glibc 2.17).
OLDEST_MANYLINUX = 17
_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


class TargetMismatch(Exception):
    """A wheel, download or interpreter does not fit the Lambda target; str() says why."""


@dataclass(frozen=True)
class WheelTag:
    interpreter: str  # cp312
    abi: str  # cp312, abi3, none
    platform: str  # manylinux_2_28_x86_64

    def __str__(self) -> str:
        return f"{self.interpreter}-{self.abi}-{self.platform}"


def manylinux_platforms(target: LambdaTarget) -> list[str]:
    """Every manylinux platform tag the target OS can load, newest first.

    pip does not expand ``manylinux_2_28`` to older tags by itself, and the pinned wheels span
    manylinux2014 (google-crc32c, zstandard) to manylinux_2_28 (numpy, torch).
    """
    major, minor = target.os.glibc
    tags = [f"manylinux_{major}_{m}_{target.machine}" for m in range(minor, OLDEST_MANYLINUX - 1,
                                                                     -1)]
    return [*tags, f"manylinux2014_{target.machine}"]


def platform_glibc(platform_tag: str) -> tuple[int, int] | None:
    """glibc a platform tag needs (``manylinux_2_28_x86_64`` -> (2, 28)); None if not manylinux."""
    match = re.match(r"manylinux_(\d+)_(\d+)_", platform_tag)
    if match:
        return int(match[1]), int(match[2])
    return _LEGACY_MANYLINUX.get(platform_tag.split("_", 1)[0])


def wheel_tags(wheel: Path) -> list[WheelTag]:
    """The wheel's tags from its dist-info WHEEL file (the file name can be renamed)."""
    tags: list[WheelTag] = []
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".dist-info/WHEEL") and n.count("/") == 1]
        for name in names:
            for line in zf.read(name).decode().splitlines():
                if line.startswith("Tag:"):
                    tags += _expand(line.split(":", 1)[1].strip())
    if not tags:  # no WHEEL file: trust the name
        tags = _expand("-".join(wheel.name.removesuffix(".whl").split("-")[-3:]))
    return tags


def _expand(compressed: str) -> list[WheelTag]:
    """``cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64`` -> one tag per platform."""
    parts = compressed.split("-")
    if len(parts) != 3:
        return []
    return [WheelTag(i, a, p) for i in parts[0].split(".") for a in parts[1].split(".")
            for p in parts[2].split(".")]


def tag_problems(tag: WheelTag, target: LambdaTarget) -> list[str]:
    """Why one wheel tag cannot load on the target (empty: it can)."""
    problems = []
    minor = target.python[1]
    abi_ok = tag.abi == target.abi or (
        tag.abi in ("abi3", "none") and re.fullmatch(r"(cp|py)3(\d*)", tag.interpreter) is not None
        and int(tag.interpreter[3:] or 0) <= minor)
    if not abi_ok:
        problems.append(f"CPython ABI {tag.abi}, not {target.abi}")
    if not (tag.platform == "any" or tag.platform.endswith(f"_{target.machine}")):
        problems.append(f"platform {tag.platform}, not {target.machine}")
    needs = platform_glibc(tag.platform)
    if needs is not None and needs > target.os.glibc:
        problems.append(f"needs glibc {needs[0]}.{needs[1]}, {target.os.name} has "
                        f"{target.os.glibc[0]}.{target.os.glibc[1]}")
    return problems


def how_to_get(target: LambdaTarget, index_url: str = DEFAULT_TORCH_INDEX) -> str:
    """The commands that fetch the torch CPU wheel for the target and build the layer."""
    return (f"  pip download torch=={TORCH_VERSION} --no-deps --only-binary=:all: "
            f"--implementation cp --python-version {target.python_version} "
            f"--platform manylinux_2_28_{target.machine} --index-url {index_url} -d wheels\n"
            f"  make layer ARCH={target.arch} "
            f"WHEEL=$(ls wheels/torch-{TORCH_VERSION}*-{target.abi}-*{target.machine}.whl)")


def check_wheel(wheel: Path, target: LambdaTarget,
                index_url: str = DEFAULT_TORCH_INDEX) -> WheelTag:
    """The wheel's tag that fits the target; raises TargetMismatch (CUDA, ABI, arch, glibc)."""
    if not wheel.is_file():
        raise TargetMismatch(f"no torch wheel at {wheel}")
    try:
        with zipfile.ZipFile(wheel) as zf:
            cuda = sorted(n for n in zf.namelist() if is_cuda_library(n))
        tags = wheel_tags(wheel)
    except zipfile.BadZipFile as error:
        raise TargetMismatch(f"{wheel} is not a wheel (zip): {error}") from error
    if cuda:
        raise TargetMismatch(
            f"{wheel.name} is a CUDA build ({cuda[0]}, ...); the layer needs the CPU build for "
            f"{target.describe()}. Get it from the PyTorch CPU index:\n"
            f"{how_to_get(target, index_url)}")
    fitting = [t for t in tags if not tag_problems(t, target)]
    if fitting:
        return fitting[0]
    found = "; ".join(f"{t} ({', '.join(tag_problems(t, target))})" for t in tags) or "no tags"
    raise TargetMismatch(
        f"torch wheel {wheel.name} does not fit the Lambda target.\n"
        f"  found:  {found}\n"
        f"  needed: {target.describe()}: a {target.abi} wheel for {target.machine}, "
        f"manylinux up to {target.manylinux_platform}\n"
        f"A layer built from it could not load on Lambda. Get the right wheel and build with "
        f"it:\n{how_to_get(target, index_url)}")


def download_torch(target: LambdaTarget, index_url: str, dest: Path) -> Path:
    """pip-download the torch CPU wheel for the target; TargetMismatch explains a miss."""
    cmd = [sys.executable, "-m", "pip", "download", f"torch=={TORCH_VERSION}", "--no-deps",
           "--only-binary=:all:", "--implementation", "cp", "--python-version",
           target.python_version, "--platform", f"manylinux_2_28_{target.machine}",
           "--index-url", index_url, "-d", str(dest), "-vv"]
    print(f"pip download torch=={TORCH_VERSION} for {target.describe()} from {index_url}",
          flush=True)
    lines: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            if line.startswith(("Downloading", "Saved", "File was already", "WARNING: Retry")):
                print(f"  {line.rstrip()[:150]}", flush=True)  # retries: one short line each
    wheels = sorted(dest.glob(f"torch-{TORCH_VERSION}*.whl"))
    if proc.returncode == 0 and wheels:
        return wheels[-1]
    raise TargetMismatch(explain_miss(target, index_url, lines))


def explain_miss(target: LambdaTarget, index_url: str, pip_lines: list[str]) -> str:
    """Why pip found no wheel: the torch wheels it saw (other ABIs) and pip's last error."""
    seen = sorted({unquote(m[1]).rsplit("/", 1)[-1] for line in pip_lines
                   if (m := re.search(r"Skipping link: .*?: (\S+?\.whl)", line))
                   and f"torch-{TORCH_VERSION}" in unquote(m[1])})
    errors = [line for line in pip_lines if line.startswith("ERROR")
              and "ResolutionImpossible" not in line][:1]
    offline = any("NewConnectionError" in line or "NameResolutionError" in line
                  for line in pip_lines)
    text = (f"pip found no torch {TORCH_VERSION} CPU wheel for {target.describe()}, "
            f"platform manylinux_2_28_{target.machine}, at {index_url}.")
    if offline:
        text += " The index could not be reached from this machine."
    if seen:
        text += f"\n  pip saw only wheels for another target: {', '.join(seen)}"
    if errors and not (seen or offline):
        text += f"\n  pip: {errors[0]}"
    return (f"{text}\nDownload the {target.abi} wheel where the index is reachable (or set "
            f"TORCH_INDEX_URL / --torch-index-url to a mirror), then build with it:\n"
            f"{how_to_get(target, index_url)}")
