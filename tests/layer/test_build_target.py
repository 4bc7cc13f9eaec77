"""build.py builds for infra.lambda_runtime's target, never for this machine by accident.

A torch wheel for another ABI, architecture or a CUDA build is refused before anything is
staged, with the commands that fetch the right one; so is a download that finds none.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import runtime_deps
import target_python
import target_wheel
from target_wheel import TargetMismatch, WheelTag, check_wheel, manylinux_platforms, tag_problems

from infra.lambda_runtime import lambda_target
from tests.layer.conftest import BUILD, ROOT, find_wheel

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CP311_NAME = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def fake_wheel(folder: Path, tag: str = "cp311-cp311-manylinux_2_28_x86_64",
               extra: tuple[str, ...] = ()) -> Path:
    """A tiny zip shaped like the torch wheel (dist-info WHEEL tags, a few members)."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"torch-2.13.0+cpu-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("torch-2.13.0+cpu.dist-info/WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n")
        zf.writestr("torch/__init__.py", "")
        for name in extra:
            zf.writestr(name, b"\x7fELF")
    return wheel


def run_build(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "TORCH_INDEX_URL"}
    return subprocess.run([sys.executable, str(BUILD), "--level", "3", *args],
                          capture_output=True, text=True, env={**base, **(env or {})},
                          timeout=120)


def assert_nothing_staged(proc: subprocess.CompletedProcess[str], out: Path) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert not out.exists(), "the refused build touched the output directory"
    assert "unzipped" not in proc.stdout and "packing" not in proc.stdout


def test_refuses_cp311_wheel_for_python312(tmp_path: Path) -> None:
    wheel = find_wheel() or fake_wheel(tmp_path / "wheels")
    out = tmp_path / "dist"
    proc = run_build("--wheel", str(wheel), "--out", str(out))
    assert_nothing_staged(proc, out)
    err = proc.stderr
    assert "CPython ABI cp311, not cp312" in err
    assert "python3.12 (cp312, Amazon Linux 2023, glibc 2.34, x86_64)" in err
    assert (f"pip download torch==2.13.0 --no-deps --only-binary=:all: --implementation cp "
            f"--python-version 3.12 --platform manylinux_2_28_x86_64 --index-url {CPU_INDEX}"
            ) in err
    assert "make layer ARCH=x86_64 WHEEL=" in err


@pytest.mark.parametrize(("tag", "args", "expect"), [
    ("cp312-cp312-manylinux_2_28_x86_64", ["--arch", "arm64"],
     "platform manylinux_2_28_x86_64, not aarch64"),
    ("cp312-cp312-manylinux_2_35_x86_64", [], "needs glibc 2.35, Amazon Linux 2023 has 2.34"),
])
def test_refuses_wrong_arch_or_glibc(tmp_path: Path, tag: str, args: list[str],
                                     expect: str) -> None:
    out = tmp_path / "dist"
    proc = run_build("--wheel", str(fake_wheel(tmp_path, tag)), "--out", str(out), *args)
    assert_nothing_staged(proc, out)
    assert expect in proc.stderr


def test_refuses_cuda_build(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path, "cp312-cp312-manylinux_2_28_x86_64",
                       extra=("torch/lib/libtorch_cuda.so",))
    out = tmp_path / "dist"
    proc = run_build("--wheel", str(wheel), "--out", str(out))
    assert_nothing_staged(proc, out)
    assert "CUDA build (torch/lib/libtorch_cuda.so" in proc.stderr
    assert f"--index-url {CPU_INDEX}" in proc.stderr


@pytest.mark.parametrize("via", ["flag", "env"])
def test_download_miss_names_what_pip_saw(tmp_path: Path, via: str) -> None:
    """An empty local index plus a find-links dir with only a cp311 wheel: no network."""
    index = tmp_path / "empty-index"
    index.mkdir()
    fake_wheel(tmp_path / "links")
    env = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": str(tmp_path / "links"),
           "PIP_RETRIES": "0"}
    args = ["--out", str(tmp_path / "dist")]
    if via == "flag":
        args += ["--torch-index-url", index.as_uri()]
    else:
        env["TORCH_INDEX_URL"] = index.as_uri()
    proc = run_build(*args, env=env)
    assert_nothing_staged(proc, tmp_path / "dist")
    err = proc.stderr
    assert "pip found no torch 2.13.0 CPU wheel for python3.12 (cp312" in err
    assert index.as_uri() in err
    assert f"pip saw only wheels for another target: {CP311_NAME}" in err
    assert "--python-version 3.12 --platform manylinux_2_28_x86_64" in err


def test_wheel_tags_and_platforms() -> None:
    target = lambda_target("x86_64")
    assert tag_problems(WheelTag("cp312", "cp312", "manylinux_2_28_x86_64"), target) == []
    assert tag_problems(WheelTag("cp39", "abi3", "manylinux2014_x86_64"), target) == []
    assert tag_problems(WheelTag("py3", "none", "any"), target) == []
    assert tag_problems(WheelTag("cp313", "abi3", "manylinux2014_x86_64"), target) == [
        "CPython ABI abi3, not cp312"]
    al2 = lambda_target("arm64", "python3.11")
    assert tag_problems(WheelTag("cp311", "cp311", "manylinux_2_28_aarch64"), al2) == [
        "needs glibc 2.28, Amazon Linux 2 has 2.26"]
    platforms = manylinux_platforms(target)
    assert platforms[0] == "manylinux_2_34_x86_64" and platforms[-1] == "manylinux2014_x86_64"
    assert {"manylinux_2_28_x86_64", "manylinux_2_17_x86_64"} <= set(platforms)
    assert "manylinux_2_28_aarch64" not in manylinux_platforms(al2)  # AL2: glibc 2.26


def test_check_wheel_reads_the_wheel_file_not_its_name(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path, "cp311-cp311-manylinux_2_28_x86_64")
    renamed = wheel.rename(tmp_path / "torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    with pytest.raises(TargetMismatch, match="cp311"):
        check_wheel(renamed, lambda_target("x86_64"))
    assert str(check_wheel(renamed, lambda_target("x86_64", python_override="3.11"))) == (
        "cp311-cp311-manylinux_2_28_x86_64")


def test_target_python() -> None:
    assert target_python.find_target_python(
        lambda_target("x86_64", python_override="3.11"), None) == sys.executable
    with pytest.raises(TargetMismatch, match=r"Python 3\.11, but the layer targets Python 3\.12"):
        target_python.find_target_python(lambda_target("x86_64"), Path(sys.executable))
    found = target_python.find_target_python(lambda_target("x86_64"), None)
    if found is not None:  # this machine has pyenv's 3.12; CI may not
        assert target_python.interpreter_version(found) == (3, 12)
    assert target_python.interpreter_version("/nonexistent/python") is None
    warning = target_python.no_pyc_warning(lambda_target("x86_64"))
    assert "NO .pyc files" in warning and "4 s" in warning


def test_requirements_are_exact_pins(tmp_path: Path) -> None:
    pins = runtime_deps.read_requirements()
    assert {"numpy", "boto3", "botocore", "google-crc32c"} <= set(pins)
    loose = tmp_path / "requirements.txt"
    loose.write_text("numpy==2.4.6  # ok\nredis>=8\n")
    with pytest.raises(ValueError, match=r"requirements.txt:2: 'redis>=8' is not an exact pin"):
        runtime_deps.read_requirements(loose)


def test_runtime_dep_pins_match_pyproject() -> None:
    """functions/requirements.txt (the layer's and the image's list) is pinned as pyproject."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = runtime_deps.read_requirements()
    assert {f"{name}=={version}" for name, version in pins.items()} <= set(deps)
    assert target_wheel.TORCH_VERSION == "2.13.0" and "torch==2.13.0" in deps
