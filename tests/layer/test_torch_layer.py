"""The torch layer: build.py packs a stripped torch into torch.tar.zst, the loader unpacks it.

The fast tests drive the loader against a tiny fake archive. The slow ones use the real layer
(conftest.py builds it once from the cp311 torch CPU wheel at zstd -3), unpack it in processes
that cannot see the venv's site-packages, train a step, and race two cold starts on one target.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import runtime_deps
import zstandard

from infra.lambda_runtime import tree_bytes
from tests.layer.wheels import make_wheel

ROOT = Path(__file__).resolve().parents[2]
LOADER = ROOT / "layers" / "torch" / "loader" / "fasdl_torch_loader.py"
LIMIT = 262_144_000


def load_loader(path: Path = LOADER, name: str = "fasdl_torch_loader_under_test") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# --- fast: loader logic against a tiny archive ------------------------------------------


def make_archive(folder: Path, version: str = "fake-1") -> Path:
    """A torch.tar.zst holding a one-file `torch` package, plus its manifest."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        body = f"__version__ = {version!r}\n".encode()
        info = tarfile.TarInfo("torch/__init__.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    data = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(buf.getvalue())
    archive = folder / "torch.tar.zst"
    archive.write_bytes(data)
    manifest = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "archive_bytes": len(data),
        "unpacked_bytes": len(body),
        "files": 1,
        "torch_version": version,
    }
    (folder / "torch.tar.zst.json").write_text(json.dumps(manifest))
    return archive


@pytest.fixture
def loader(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setattr(sys, "path", list(sys.path))  # ensure_torch prepends the target
    monkeypatch.delenv("FASDL_TORCH_ARCHIVE", raising=False)
    yield load_loader()


def test_unpacks_once_then_reuses(loader: ModuleType, tmp_path: Path) -> None:
    archive = make_archive(tmp_path)
    target = tmp_path / "t"
    assert loader.ensure_torch(str(target), str(archive)) == str(target)
    assert loader.last_result.outcome == "installed"
    assert (target / "torch" / "__init__.py").is_file()
    assert sys.path[0] == str(target)
    assert loader.read_marker(str(target))["sha256"] == loader.read_manifest(str(archive))["sha256"]
    loader.ensure_torch(str(target), str(archive))
    assert loader.last_result.outcome == "reused"
    assert sorted(os.listdir(tmp_path)) == ["t", "torch.tar.zst", "torch.tar.zst.json"]


@pytest.mark.parametrize("marker", [None, {"sha256": "from-an-older-layer"}])
def test_partial_or_stale_tree_is_replaced(
    loader: ModuleType, tmp_path: Path, marker: dict[str, str] | None
) -> None:
    archive = make_archive(tmp_path, version="new")
    target = tmp_path / "t"
    (target / "torch").mkdir(parents=True)
    (target / "torch" / "__init__.py").write_text("__version__ = 'old'\n")
    if marker is not None:
        (target / loader.MARKER).write_text(json.dumps(marker))
    loader.ensure_torch(str(target), str(archive))
    assert loader.last_result.outcome == "installed"
    assert "'new'" in (target / "torch" / "__init__.py").read_text()
    assert not [n for n in os.listdir(tmp_path) if ".old-" in n or ".tmp-" in n]


def test_finds_archive_above_itself_or_via_env(
    loader: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layer = tmp_path / "opt"
    (layer / "python").mkdir(parents=True)
    archive = make_archive(layer)
    copy = layer / "python" / "fasdl_torch_loader.py"
    copy.write_text(LOADER.read_text())
    module = load_loader(copy, "fasdl_torch_loader_copy")
    assert module.find_archive() == str(archive)  # /opt/python/loader -> /opt/torch.tar.zst
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = make_archive(elsewhere)
    monkeypatch.setenv("FASDL_TORCH_ARCHIVE", str(other))
    assert module.find_archive() == str(other)


def test_mismatched_manifest_and_dead_orphans(loader: ModuleType, tmp_path: Path) -> None:
    archive = make_archive(tmp_path)
    orphan = tmp_path / "t.tmp-999999999-deadbeef"  # no such pid
    orphan.mkdir()
    loader.ensure_torch(str(tmp_path / "t"), str(archive))
    assert not orphan.exists()
    manifest = json.loads((tmp_path / "torch.tar.zst.json").read_text())
    manifest["archive_bytes"] += 1
    (tmp_path / "torch.tar.zst.json").write_text(json.dumps(manifest))
    with pytest.raises(RuntimeError, match="manifest"):
        loader.ensure_torch(str(tmp_path / "t2"), str(archive))


# --- slow: the real layer ---------------------------------------------------------------


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Path]:
    """Where a test unpacks torch; 480 MB, so removed afterwards."""
    yield tmp_path / "fasdl-torch"
    for path in tmp_path.iterdir():
        shutil.rmtree(path, ignore_errors=True)


def run_isolated(code: str, *args: str) -> subprocess.Popen[str]:
    """A Python that sees the stdlib only (-I -S: no site-packages, no PYTHON* env)."""
    return subprocess.Popen([sys.executable, "-I", "-S", "-c", code, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


TRAIN = r"""
import importlib.util, json, sys, time
layer_python, target = sys.argv[1], sys.argv[2]
assert importlib.util.find_spec("torch") is None, "torch visible before the loader ran"
sys.path.insert(0, layer_python)
import fasdl_torch_loader
fasdl_torch_loader.ensure_torch(target)
t0 = time.monotonic()
import torch
import_s = time.monotonic() - t0
assert torch.__file__.startswith(target), torch.__file__
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
before = [p.detach().clone() for p in net.parameters()]
loss = torch.nn.functional.cross_entropy(net(x), y)
opt.zero_grad()
loss.backward()
opt.step()
changed = all(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
leaks = sorted({n for n, m in list(sys.modules.items())
                if "-packages" in (getattr(m, "__file__", None) or "")})
r = fasdl_torch_loader.last_result
print(json.dumps({"outcome": r.outcome, "unpack_s": r.seconds, "import_s": import_s,
                  "loss": loss.item(), "changed": changed, "leaks": leaks}))
"""

RACE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import fasdl_torch_loader
fasdl_torch_loader.ensure_torch(sys.argv[2])
r = fasdl_torch_loader.last_result
print(json.dumps({"outcome": r.outcome, "seconds": r.seconds}))
"""


@pytest.mark.slow
def test_layer_fits_lambda_limit(layer: dict[str, Any]) -> None:
    size = tree_bytes(layer["out"])
    total = size + tree_bytes(ROOT / "functions")
    archive = (layer["out"] / "torch.tar.zst").stat().st_size
    unpacked = layer["manifest"]["unpacked_bytes"]
    print(f"layer dir {size:,} B (archive {archive:,} B, zstd -3); with functions {total:,} B;"
          f" unpacked tree {unpacked:,} B; build {layer['build_s']:.1f} s")
    assert total < LIMIT
    assert sorted(p.name for p in layer["out"].iterdir()) == [
        "python", "torch.tar.zst", "torch.tar.zst.json"]
    assert (layer["out"] / "python" / "fasdl_torch_loader.py").is_file()
    assert (layer["out"] / "python" / "zstandard" / "__init__.py").is_file()


@pytest.mark.slow
def test_unpack_and_train_without_site_packages(layer: dict[str, Any], target: Path) -> None:
    proc = run_isolated(TRAIN, str(layer["out"] / "python"), str(target))
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-4000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    print(f"cold start: unpack {result['unpack_s']:.2f} s, import torch {result['import_s']:.2f} s,"
          f" loss {result['loss']:.3f}")
    assert result["outcome"] == "installed"
    assert result["changed"], "the optimizer step did not update the parameters"
    assert result["leaks"] == []


@pytest.mark.slow
def test_concurrent_cold_starts_share_one_tree(layer: dict[str, Any], target: Path) -> None:
    py = str(layer["out"] / "python")
    procs = [run_isolated(RACE, py, str(target)) for _ in range(2)]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-4000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    outcomes = sorted(r["outcome"] for r in results)
    print(f"concurrent cold starts: {results}")
    # Exactly one unpack wins; the other lost the rename race or came late and reused it.
    assert outcomes in (["discarded", "installed"], ["installed", "reused"]), outcomes
    manifest = layer["manifest"]
    marker = json.loads((target / ".fasdl-torch-complete").read_text())
    assert marker["sha256"] == manifest["sha256"]
    files = [p for p in target.rglob("*") if not p.is_dir() and p.name != ".fasdl-torch-complete"]
    assert len(files) == manifest["files"]
    assert sum(p.lstat().st_size for p in files) == manifest["unpacked_bytes"]
    assert os.listdir(target.parent) == ["fasdl-torch"], "a temp tree was left behind"


DEPS = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy, redis, aws_lambda_powertools, google_crc32c, boto3, botocore
from aws_lambda_powertools import Logger, Metrics
from redis.utils import HIREDIS_AVAILABLE
assert google_crc32c.implementation == "c", "the slow pure-Python CRC fallback was picked"
assert HIREDIS_AVAILABLE, "redis parses replies in Python: hiredis is missing from the layer"
print(json.dumps({m.__name__: [m.__file__, getattr(m, "__version__", "")]
                  for m in (numpy, redis, aws_lambda_powertools, google_crc32c, boto3, botocore)}))
"""


@pytest.mark.slow
def test_runtime_deps_come_from_the_layer(layer: dict[str, Any]) -> None:
    """The layer carries functions/requirements.txt, exactly; the runtime's boto3 is not used."""
    python_dir = layer["out"] / "python"
    proc = run_isolated(DEPS, str(python_dir))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-4000:]
    files = json.loads(stdout.strip().splitlines()[-1])
    assert all(path.startswith(str(python_dir)) for path, _ in files.values()), files
    pins = runtime_deps.read_requirements()
    assert layer["manifest"]["runtime_deps"] == pins
    assert files["boto3"][1] == pins["boto3"] and files["botocore"][1] == pins["botocore"]
    assert files["numpy"][1] == pins["numpy"]


BESIDE = r"""
import json, sys
sys.path[:0] = sys.argv[1:]  # the order Lambda gives the layers' python/ folders
import fasdl_test_extra, numpy
print(json.dumps({"value": fasdl_test_extra.VALUE, "numpy": numpy.__file__}))
"""


@pytest.mark.slow
def test_requirements_layer_beside_the_real_torch_layer(layer: dict[str, Any],
                                                        tmp_path: Path) -> None:
    """A requirements layer built for the real layer's target (from its manifest) leaves out
    what it holds (numpy, jmespath) and imports beside it in a process without the venv."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "fasdl-test-extra", "1.0", {"fasdl_test_extra/__init__.py": b"VALUE = 7\n"},
               requires=("numpy>=2", "jmespath"))
    (tmp_path / "requirements.txt").write_text("fasdl-test-extra==1.0\nnumpy==2.4.6\n")
    out = tmp_path / "requirements-layer"
    result = subprocess.run(
        [sys.executable, str(ROOT / "layers" / "torch" / "requirements_layer.py"),
         "--requirements", str(tmp_path / "requirements.txt"), "--torch-layer",
         str(layer["out"]), "--out", str(out), "--find-links", str(wheels)],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "requirements.json").read_text())
    assert manifest["python"] == layer["manifest"]["python"] == "cp311"
    assert manifest["torch_layer_sha256"] == layer["manifest"]["sha256"]
    assert sorted(path.name for path in (out / "python").iterdir()) == [
        "fasdl_test_extra", "fasdl_test_extra-1.0.dist-info"]
    proc = run_isolated(BESIDE, str(out / "python"), str(layer["out"] / "python"))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-4000:]
    imported = json.loads(stdout.strip().splitlines()[-1])
    assert imported["value"] == 7
    assert imported["numpy"].startswith(str(layer["out"] / "python"))
