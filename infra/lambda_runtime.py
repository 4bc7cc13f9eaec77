"""The Lambda runtime every function uses, and the platform AWS runs it on.

One definition for infra (function and layer runtimes), the layer build and its compatibility
scan, the container image and the docs. Stdlib only, so the layer build can import it without
the CDK.

Why ``python3.12``: torch 2.13 and numpy 2.x wheels are ``manylinux_2_28`` (glibc >= 2.28).
Lambda's ``python3.11`` runs on Amazon Linux 2 (glibc 2.26), where they cannot load; only
``python3.12`` and later run on Amazon Linux 2023 (glibc 2.34). Of those, 3.12 is the closest to
the 3.11 the project is developed and tested with, so the code that runs on Lambda differs
least from the code the suite exercises; it is supported until October 2028.

Sources (AWS documentation):
- runtimes, their OS and deprecation dates:
  https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtimes.html
- glibc of each OS: Amazon Linux 2 ships glibc 2.26; Amazon Linux 2023 ships glibc 2.34
  (https://docs.aws.amazon.com/linux/al2023/ug/compare-with-al2.html and the AL2023 package
  list https://docs.aws.amazon.com/linux/al2023/release-notes/all-packages.html).
- container base images: https://gallery.ecr.aws/lambda/python (tag = Python version).
- libstdc++ of each OS: AL2 ships GCC 7.3, AL2023 GCC 11.3
  (https://docs.aws.amazon.com/linux/al2023/ug/glibc-gcc-and-binutils.html); the newest
  ``GLIBCXX_`` symbol version of each GCC release is listed in the libstdc++ manual's ABI
  policy (https://gcc.gnu.org/onlinedocs/libstdc++/manual/abi.html): GCC 7.2 -> 3.4.24,
  GCC 11.1 -> 3.4.29, unchanged until GCC 12.1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PYTHON_RUNTIME = "python3.12"


@dataclass(frozen=True)
class OperatingSystem:
    name: str
    glibc: tuple[int, int]
    # Newest GLIBCXX_ symbol version its libstdc++ provides (None: unknown).
    glibcxx: tuple[int, int, int] | None = None


AMAZON_LINUX_2 = OperatingSystem("Amazon Linux 2", (2, 26), (3, 4, 24))
AMAZON_LINUX_2023 = OperatingSystem("Amazon Linux 2023", (2, 34), (3, 4, 29))

# Lambda's Python runtimes and the OS each runs on (lambda-runtimes.html).
RUNTIME_OS: dict[str, OperatingSystem] = {
    "python3.9": AMAZON_LINUX_2,
    "python3.10": AMAZON_LINUX_2,
    "python3.11": AMAZON_LINUX_2,
    "python3.12": AMAZON_LINUX_2023,
    "python3.13": AMAZON_LINUX_2023,
    "python3.14": AMAZON_LINUX_2023,
}

# Lambda architecture name -> ELF machine / wheel platform suffix.
ARCH_MACHINE = {"x86_64": "x86_64", "arm64": "aarch64"}


@dataclass(frozen=True)
class LambdaTarget:
    """What a package must be built for: CPython ABI, OS (glibc) and CPU architecture."""

    runtime: str
    python: tuple[int, int]
    os: OperatingSystem
    arch: str

    @property
    def abi(self) -> str:
        """The CPython ABI tag of wheels and extension modules, e.g. ``cp312``."""
        return f"cp{self.python[0]}{self.python[1]}"

    @property
    def python_version(self) -> str:
        return f"{self.python[0]}.{self.python[1]}"

    @property
    def machine(self) -> str:
        return ARCH_MACHINE[self.arch]

    @property
    def manylinux_platform(self) -> str:
        """The newest manylinux tag the OS can load, e.g. ``manylinux_2_34_x86_64``."""
        return f"manylinux_{self.os.glibc[0]}_{self.os.glibc[1]}_{self.machine}"

    def describe(self) -> str:
        glibc = ".".join(map(str, self.os.glibc))
        return (f"{self.runtime} ({self.abi}, {self.os.name}, glibc {glibc}, {self.arch})")


def runtime_python(runtime: str) -> tuple[int, int]:
    """``python3.12`` -> (3, 12)."""
    if runtime not in RUNTIME_OS:
        raise ValueError(f"unknown Lambda runtime {runtime!r}; known: {', '.join(RUNTIME_OS)}")
    major, minor = runtime.removeprefix("python").split(".")
    return int(major), int(minor)


def lambda_target(arch: str, runtime: str = PYTHON_RUNTIME, *,
                  python_override: str | None = None) -> LambdaTarget:
    """The build target of ``runtime`` on ``arch``.

    ``python_override`` ("3.11") keeps the runtime's OS but changes the CPython ABI. It exists
    for tests only: the one torch CPU wheel on the development machines is cp311.
    """
    if arch not in ARCH_MACHINE:
        raise ValueError(f"unknown Lambda architecture {arch!r}; known: x86_64, arm64")
    python = runtime_python(runtime)
    if python_override is not None:
        major, _, minor = python_override.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            raise ValueError(f"python override must look like 3.11, got {python_override!r}")
        python = (int(major), int(minor))
    return LambdaTarget(runtime=runtime, python=python, os=RUNTIME_OS[runtime], arch=arch)


def image_tag(runtime: str = PYTHON_RUNTIME) -> str:
    """The AWS base image of ``runtime`` for the container packaging."""
    major, minor = runtime_python(runtime)
    return f"public.ecr.aws/lambda/python:{major}.{minor}"

# Lambda's limit on a function's code and all its layers, unzipped (bytes)
UNZIPPED_CODE_LIMIT = 262_144_000


def tree_bytes(root: Path) -> int:
    """The bytes a file or folder adds to UNZIPPED_CODE_LIMIT: the one rule of the synth's
    check (infra/settings.py), the user code's cap (infra/user_code.py) and the layer scan
    (layers/torch/lambda_scan.py, build.py, requirements_layer.py).

    * each file's apparent size (``st_size``): Lambda counts unzipped bytes, not disk blocks;
    * symbolic links are followed, to files and folders: CDK's asset zip stores a link's
      target, not the link (aws-cdk#1318), and the user's code is copied the same way
      (shutil.copytree); a dangling link ships nothing, and a link back to a folder it sits
      in (a cycle) adds nothing;
    * ``__pycache__`` folders are skipped: no asset of the stack ships them (ASSET_EXCLUDES
      and the layers' excludes in infra/compute.py, the user code's SKIPPED), while a local
      run or pip leaves them beside the sources.
    """
    if root.is_file():
        return root.stat().st_size
    return _folder_bytes(root, frozenset())


def _folder_bytes(folder: Path, above: frozenset[str]) -> int:
    real = os.path.realpath(folder)
    if real in above:  # a link cycle: this folder is already being counted
        return 0
    total = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir():  # is_dir, is_file and stat follow links
                if entry.name != "__pycache__":
                    total += _folder_bytes(Path(entry.path), above | {real})
            elif entry.is_file():
                total += entry.stat().st_size
    return total

# /tmp the stack reserves for the unpacked torch tree, .pyc included (measured:
# docs/cold-start.md), plus headroom; the layer build's scan fails when a build's unpacked tree
# does not fit it.
TORCH_TMP_RESERVE_MB = 640
