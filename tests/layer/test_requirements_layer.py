"""layers/torch/requirements_layer.py: the layer of workload.requirements, built with real pip
from real wheel files, for the torch layer's target (its manifest), scanned like the torch
layer; refused pins exit 2 naming the field, scan findings exit 3 and write no manifest."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fasdl.contract.fields import PlanError
from fasdl.contract.requirements import (
    LOCAL_LAYERS_ENV,
    REQUIREMENTS_MANIFEST,
    local_layer,
    local_layer_dir,
)
from infra.lambda_runtime import PYTHON_RUNTIME, lambda_target
from tests.layer.wheels import make_wheel

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "layers" / "torch" / "requirements_layer.py"
CODE = {"fasdl_test_extra/__init__.py": b"VALUE = 42\n"}


def torch_layer(folder: Path, python: str | None = None) -> Path:
    """A torch layer folder as build.py leaves it, reduced to what this build reads: the
    manifest (the target) and python/'s dist-infos (what the layer already holds)."""
    target = lambda_target("x86_64")
    manifest = {"arch": "x86_64", "runtime": PYTHON_RUNTIME, "python": python or target.abi,
                "sha256": "0" * 64, "unpacked_bytes": 1000}
    folder.mkdir(parents=True)
    (folder / "torch.tar.zst.json").write_text(json.dumps(manifest))
    for dist in ("numpy-2.4.6", "boto3-1.44.5", "jmespath-1.0.1"):
        info = folder / "python" / f"{dist}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Name: {dist.split('-')[0]}\n")
    return folder


def build(tmp_path: Path, requirements: str, wheels: Path, *, layer: Path | None = None,
          out: Path | None = None) -> subprocess.CompletedProcess[str]:
    file = tmp_path / "requirements.txt"
    file.write_text(requirements)
    layer = layer or torch_layer(tmp_path / "torch-layer")
    return subprocess.run(
        [sys.executable, str(BUILD), "--requirements", str(file), "--torch-layer", str(layer),
         "--out", str(out or tmp_path / "out"), "--find-links", str(wheels),
         "--function-dir", str(tmp_path / "torch-layer")],
        capture_output=True, text=True, timeout=180, check=False)


def test_builds_the_users_pins_and_leaves_out_what_the_torch_layer_holds(
        tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "fasdl-test-extra", "1.0", CODE,
               requires=("numpy>=2", "jmespath", "colorama; sys_platform == 'win32'",
                         "pytest; extra == 'test'"))
    result = build(tmp_path, "# mine\nfasdl-test-extra==1.0\nnumpy==2.4.6\n", wheels)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    assert (out / "python" / "fasdl_test_extra" / "__init__.py").read_bytes() == CODE[
        "fasdl_test_extra/__init__.py"]
    assert not list((out / "python").glob("numpy*")), "numpy is the torch layer's"
    manifest = json.loads((out / REQUIREMENTS_MANIFEST).read_text())
    digest = hashlib.sha256((tmp_path / "requirements.txt").read_bytes()).hexdigest()
    assert manifest["requirements_sha256"] == digest
    assert manifest["pins"] == {"fasdl-test-extra": "1.0"}
    assert (manifest["arch"], manifest["python"]) == ("x86_64", lambda_target("x86_64").abi)
    assert "OK: compatible" in result.stdout


@pytest.mark.parametrize(("requirements", "message"), [
    ("numpy==2.0.0\n", "numpy==2.0.0, but the functions already ship numpy==2.4.6"),
    ("torch==2.13.0\n", "torch comes with the torch layer"),
    ("fasdl-test-extra>=1.0\n", "requirements.txt:1: 'fasdl-test-extra>=1.0' is not an exact pin"),
    ("numpy==2.4.6\n", "pins nothing the functions do not already ship"),
])
def test_refused_pins_exit_2_naming_the_field(tmp_path: Path, requirements: str,
                                              message: str) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "fasdl-test-extra", "1.0", CODE)
    result = build(tmp_path, requirements, wheels)
    assert result.returncode == 2, result.stdout
    assert "workload.requirements" in result.stderr and message in result.stderr
    assert not (tmp_path / "out").exists()


def test_an_unpinned_dependency_is_named(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "fasdl-test-extra", "1.0", CODE, requires=("tinydep>=1", "jmespath"))
    result = build(tmp_path, "fasdl-test-extra==1.0\n", wheels)
    assert result.returncode == 2
    assert "does not pin everything" in result.stderr
    assert "fasdl_test_extra needs tinydep>=1" in result.stderr and "jmespath" not in result.stderr


def _extension_module() -> Path:
    """A real extension module of this machine's CPython 3.11 (the functions run 3.12):
    zstandard's C backend, a pinned dependency."""
    import zstandard.backend_c

    path = Path(str(zstandard.backend_c.__file__))
    assert path.name.endswith(".cpython-311-x86_64-linux-gnu.so"), path
    return path


def test_a_native_file_for_another_python_fails_the_scan_and_keeps_the_old_layer(
        tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "fasdl-test-extra", "1.0", CODE)
    assert build(tmp_path, "fasdl-test-extra==1.0\n", wheels).returncode == 0
    before = (tmp_path / "out" / REQUIREMENTS_MANIFEST).read_text()
    module = _extension_module()
    make_wheel(wheels, "fasdl-test-native", "1.0",
               {f"fasdl_test_native/{module.name}": module.read_bytes()})
    result = build(tmp_path, "fasdl-test-native==1.0\n", wheels, layer=tmp_path / "torch-layer")
    assert result.returncode == 3, result.stderr
    assert "abi-tag" in result.stdout and "FAILED" in result.stdout
    assert (tmp_path / "out" / REQUIREMENTS_MANIFEST).read_text() == before


def test_without_a_built_torch_layer_it_says_so(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "fasdl-test-extra", "1.0", CODE)
    result = build(tmp_path, "fasdl-test-extra==1.0\n", wheels, layer=tmp_path / "absent")
    assert result.returncode == 2
    assert "--torch-layer: no finished torch layer build" in result.stderr
    assert "make layer" in result.stderr


def _local(tmp_path: Path, requirements: str, wheels: Path,
           monkeypatch: pytest.MonkeyPatch) -> Path:
    """A requirements file whose local layer pip may build from ``wheels`` only."""
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv(LOCAL_LAYERS_ENV, str(tmp_path / "local-layers"))
    file = tmp_path / "requirements.txt"
    file.write_text(requirements)
    return file


def test_the_local_layer_is_built_once_for_this_python_with_the_same_checks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "fasdl-test-extra", "1.0", CODE, requires=("numpy>=2", "jmespath"))
    file = _local(tmp_path, "fasdl-test-extra==1.0\nnumpy==2.4.6\n", wheels, monkeypatch)
    folder = local_layer(file)
    assert folder == local_layer_dir(file) and folder.parent == tmp_path / "local-layers"
    assert (folder / "python" / "fasdl_test_extra" / "__init__.py").read_bytes() == CODE[
        "fasdl_test_extra/__init__.py"]
    assert not list((folder / "python").glob("numpy*")), "numpy is what the functions ship"
    manifest = json.loads((folder / REQUIREMENTS_MANIFEST).read_text())
    assert manifest["target"] == "local" and manifest["python"] == sys.implementation.cache_tag
    assert manifest["pins"] == {"fasdl-test-extra": "1.0"}
    (wheels / "fasdl_test_extra-1.0-py3-none-any.whl").unlink()  # built: pip is not asked again
    assert local_layer(file) == folder
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no half-built folder


@pytest.mark.parametrize(("requirements", "requires", "message"), [
    ("torch==2.13.0\n", (), "torch comes with the torch layer"),
    ("numpy==2.0.0\n", (), "numpy==2.0.0, but the functions already ship numpy==2.4.6"),
    ("fasdl-test-extra==1.0\n", ("tinydep>=1",),
     "does not pin everything its packages need (pin each, e.g. from `pip freeze`): "
     "fasdl_test_extra needs tinydep>=1"),
    ("fasdl-test-extra==2.0\n", (), "pip could not install fasdl-test-extra==2.0: No matching "
                                    "distribution found for fasdl-test-extra==2.0"),
])
def test_the_local_layer_refuses_in_one_line_naming_the_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, requirements: str,
        requires: tuple[str, ...], message: str) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "fasdl-test-extra", "1.0", CODE, requires=requires)
    file = _local(tmp_path, requirements, wheels, monkeypatch)
    with pytest.raises(PlanError) as raised:
        local_layer(file)
    assert str(raised.value).startswith("plan field 'workload.requirements': ")
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert not (tmp_path / "local-layers").exists() or not any(
        (tmp_path / "local-layers").iterdir())
