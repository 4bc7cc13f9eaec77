"""The Lambda compatibility scan (layers/torch/lambda_scan.py).

Fast tests scan a small layer made of real ELF files from this machine (torch and numpy from
the venv, a system library). Slow tests judge the real layer against three targets.
"""

from __future__ import annotations

import importlib.util
import io
import json
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import lambda_scan
import pytest
import zstandard
from lambda_scan import LIMIT, Inventory, evaluate, scan

from infra.lambda_runtime import TORCH_TMP_RESERVE_MB, LambdaTarget, lambda_target, tree_bytes

ROOT = Path(__file__).resolve().parents[2]


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


TORCH = package_dir("torch")
NUMPY_CORE = package_dir("numpy") / "_core"
TORCH_C = next(TORCH.glob("_C.cpython-311-*.so"), TORCH / "missing")
LIBSHM = TORCH / "lib" / "libshm.so"  # small; needs GLIBC 2.14
LIBTORCH_PYTHON = TORCH / "lib" / "libtorch_python.so"  # 30 MB; needs GLIBC 2.28
NUMPY_UMATH = next(NUMPY_CORE.glob("_multiarray_umath.cpython-311-*.so"), NUMPY_CORE / "x")

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or not (TORCH_C.is_file() and LIBTORCH_PYTHON.is_file()),
    reason="needs the venv's cp311 x86_64 torch (the project's dev setup)")

CP311_AL2023 = lambda_target("x86_64", python_override="3.11")  # what these files fit
PYTHON312 = lambda_target("x86_64")  # the project's runtime
AL2 = lambda_target("x86_64", "python3.11")  # Amazon Linux 2, glibc 2.26


def add_to_tar(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_layer(folder: Path, unpacked_bytes: int | None = None) -> Path:
    """A layer dir like build.py's: a torch.tar.zst with real ELF members, a manifest,
    and python/ holding numpy's extension module and libtorch_python.so."""
    buf = io.BytesIO()
    members = {"torch/__init__.py": b"", "torch/lib/libshm.so": LIBSHM.read_bytes(),
               f"torch/{TORCH_C.name}": TORCH_C.read_bytes()}
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            add_to_tar(tar, name, data)
    folder.mkdir(parents=True)
    (folder / "torch.tar.zst").write_bytes(zstandard.ZstdCompressor(level=1).compress(
        buf.getvalue()))
    size = sum(map(len, members.values())) if unpacked_bytes is None else unpacked_bytes
    (folder / "torch.tar.zst.json").write_text(json.dumps({"unpacked_bytes": size}))
    (folder / "python" / "numpy" / "_core").mkdir(parents=True)
    shutil.copy(NUMPY_UMATH, folder / "python" / "numpy" / "_core" / NUMPY_UMATH.name)
    shutil.copy(LIBTORCH_PYTHON, folder / "python" / LIBTORCH_PYTHON.name)
    (folder / "python" / "loader.py").write_text("print('not ELF')\n")
    return folder


@pytest.fixture(scope="module")
def fake_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_layer(tmp_path_factory.mktemp("scan") / "dist")


@pytest.fixture(scope="module")
def fake_inventory(fake_layer: Path) -> Inventory:
    return lambda_scan.inventory(fake_layer)


def files_of(report: lambda_scan.Report, rule: str) -> set[str]:
    return {f.file for f in report.findings if f.rule == rule}


def test_accepts_files_that_fit_the_target(fake_inventory: Inventory) -> None:
    report = evaluate(fake_inventory, CP311_AL2023)
    assert report.ok, report.findings
    assert report.elf_files == 4 and report.extension_modules == 2
    assert report.max_glibc == (2, 28)
    assert report.max_glibc_file == "python/libtorch_python.so"
    assert report.max_glibcxx is not None and report.max_glibcxx <= (3, 4, 29)
    assert "torch.tar.zst:torch/lib/libshm.so" in {e.file for e in fake_inventory.elves}


def test_cp311_extension_modules_fail_python312(fake_inventory: Inventory) -> None:
    report = evaluate(fake_inventory, PYTHON312)
    assert report.rules() == {"abi-tag"}
    assert files_of(report, "abi-tag") == {
        f"torch.tar.zst:torch/{TORCH_C.name}", f"python/numpy/_core/{NUMPY_UMATH.name}"}
    detail = report.findings[0].detail
    assert "cp311" in detail and ".cpython-312-x86_64-linux-gnu.so" in detail


def test_glibc_2_28_fails_amazon_linux_2(fake_inventory: Inventory) -> None:
    report = evaluate(fake_inventory, AL2)
    assert report.rules() == {"glibc"}  # same ABI (cp311): only glibc is wrong
    assert "python/libtorch_python.so" in files_of(report, "glibc")
    assert f"torch.tar.zst:torch/{TORCH_C.name}" not in files_of(report, "glibc")  # 2.2.5
    hit = next(f for f in report.findings if f.file == "python/libtorch_python.so")
    assert "GLIBC_2.28" in hit.detail and "2.26" in hit.detail


def test_arch_mismatch(fake_inventory: Inventory) -> None:
    report = evaluate(fake_inventory, lambda_target("arm64", python_override="3.11"))
    assert report.rules() == {"machine", "abi-tag"}
    assert len(files_of(report, "machine")) == 4
    assert "aarch64" in report.findings[-1].detail


def test_cuda_libraries_by_name_and_by_dt_needed(tmp_path: Path) -> None:
    layer = make_layer(tmp_path / "dist")
    with zipfile.ZipFile(layer / "python" / "extra.whl", "w") as zf:  # a wheel in the asset
        zf.writestr("extra/lib/libcudart.so.12", LIBSHM.read_bytes())
    # Same length, so the ELF stays valid: DT_NEEDED libtorch_cpu.so -> libcudnn.so.9.1
    patched = LIBSHM.read_bytes().replace(b"libtorch_cpu.so\x00", b"libcudnn.so.9.1\x00")
    (layer / "python" / "libfasdl_test.so").write_bytes(patched)
    report = scan(layer, CP311_AL2023)
    assert report.rules() == {"cuda"}
    assert files_of(report, "cuda") == {"python/extra.whl:extra/lib/libcudart.so.12",
                                        "python/libfasdl_test.so"}
    assert any("libcudnn.so.9.1" in f.detail for f in report.findings)


def test_size_limit_counts_layer_and_function(fake_layer: Path, tmp_path: Path) -> None:
    functions = tmp_path / "functions"
    functions.mkdir()
    (functions / "handler.py").write_text("x = 1\n")
    assert scan(fake_layer, CP311_AL2023, functions).ok
    with open(functions / "big.bin", "wb") as fh:  # sparse: counts, costs no disk
        fh.truncate(LIMIT)
    report = scan(fake_layer, CP311_AL2023, functions)
    assert report.rules() == {"size-limit"}
    assert report.total_bytes > LIMIT
    assert "262,144,000" in report.findings[0].detail


def test_tmp_reserve(tmp_path: Path) -> None:
    reserve = TORCH_TMP_RESERVE_MB * 2**20
    assert scan(make_layer(tmp_path / "fits", unpacked_bytes=reserve), CP311_AL2023).ok
    report = scan(make_layer(tmp_path / "over", unpacked_bytes=reserve + 1), CP311_AL2023)
    assert report.rules() == {"tmp-reserve"}
    assert "TORCH_TMP_RESERVE_MB" in report.findings[0].detail


def readelf_glibc(path: Path) -> tuple[int, ...] | None:
    """The newest GLIBC_ version `readelf -V` lists as needed: an independent reading."""
    out = subprocess.run(["readelf", "-V", "--wide", str(path)], capture_output=True,
                         text=True, check=False).stdout
    needs = out.split("Version needs section", 1)[-1] if "Version needs" in out else ""
    found = [tuple(map(int, v.split("."))) for v in re.findall(r"Name: GLIBC_([\d.]+)", needs)]
    return max(found, default=None)


def test_system_library_newer_than_al2023(tmp_path: Path) -> None:
    """This machine's glibc is newer than AL2023's: some system library needs more than 2.34."""
    # binutils is a system dependency of the project (scripts/install-system-deps.sh)
    assert shutil.which("readelf"), "readelf not found: run `make setup` (installs binutils)"
    libs = [p for p in Path("/usr/lib/x86_64-linux-gnu").glob("lib*.so.*") if not p.is_symlink()]
    newer = next((p for p in sorted(libs, key=lambda p: p.stat().st_size)[:300]
                  if (readelf_glibc(p) or (0,)) > (2, 34)), None)
    if newer is None:
        pytest.skip("no system library here needs glibc > 2.34")
    (tmp_path / "lib").mkdir()
    shutil.copy(newer, tmp_path / "lib" / newer.name)
    report = scan(tmp_path, CP311_AL2023)
    assert report.max_glibc == readelf_glibc(newer)
    assert "glibc" in report.rules() <= {"glibc", "glibcxx"}, report.findings
    print(f"{newer.name} needs GLIBC_{lambda_scan.vstr(report.max_glibc)}")


@pytest.mark.parametrize(("args", "code", "text"), [
    (["--python-override", "3.11"], 0, "OK: compatible"),
    ([], 3, "abi-tag (2)"),
    (["--runtime", "python3.11"], 3, "glibc ("),
])
def test_cli_exit_codes(fake_layer: Path, args: list[str], code: int, text: str,
                        capsys: pytest.CaptureFixture[str]) -> None:
    assert lambda_scan.main([str(fake_layer), "--arch", "x86_64", *args]) == code
    out = capsys.readouterr().out
    assert text in out and "newest GLIBC   2.28" in out


def test_cli_bad_input(tmp_path: Path) -> None:
    for args in ([str(tmp_path / "missing"), "--arch", "x86_64"],
                 [str(tmp_path), "--arch", "x86_64", "--runtime", "python3.99"],
                 [str(tmp_path), "--arch", "x86_64", "--python-override", "three"]):
        with pytest.raises(SystemExit) as exc:
            lambda_scan.main(args)
        assert exc.value.code == 2
    (tmp_path / "torch.tar.zst").write_bytes(b"not zstd")
    assert lambda_scan.main([str(tmp_path), "--arch", "x86_64"]) == 2


def test_cli_runs_as_a_script(fake_layer: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "layers" / "torch" / "lambda_scan.py"),
                           str(fake_layer), "--arch", "x86_64"], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    assert "python3.12 (cp312, Amazon Linux 2023, glibc 2.34, x86_64)" in proc.stdout


# --- slow: the real layer ---------------------------------------------------------------


def judge(inv: Inventory, target: LambdaTarget) -> lambda_scan.Report:
    report = evaluate(inv, target)
    print(lambda_scan.summary(report, per_rule=3))
    return report


@pytest.mark.slow
def test_built_layer_fails_python312(layer_inventory: Inventory) -> None:
    report = judge(layer_inventory, PYTHON312)
    assert report.rules() == {"abi-tag"}
    flagged = files_of(report, "abi-tag")
    assert "torch.tar.zst:torch/_C.cpython-311-x86_64-linux-gnu.so" in flagged
    assert any(f.startswith("python/zstandard/") for f in flagged)  # the loader's zstandard
    assert any(f.startswith("python/numpy/") for f in flagged)


@pytest.mark.slow
def test_built_layer_fails_amazon_linux_2(layer_inventory: Inventory) -> None:
    report = judge(layer_inventory, AL2)
    assert report.rules() == {"glibc"}
    assert report.max_glibc == (2, 28)
    assert report.max_glibc_file is not None
    assert report.max_glibc_file.startswith("torch.tar.zst:torch/lib/libtorch")
    assert "torch.tar.zst:torch/lib/libtorch_cpu.so" in files_of(report, "glibc")


@pytest.mark.slow
def test_built_layer_fits_cp311_on_al2023(layer: dict[str, Any],
                                          layer_inventory: Inventory) -> None:
    report = judge(layer_inventory, CP311_AL2023)
    assert report.ok, report.findings
    assert report.unpacked_bytes == layer["manifest"]["unpacked_bytes"]
    assert report.extension_modules > 10
    assert "result         OK: compatible" in layer["stdout"]  # the build ran the scan too


def test_tree_bytes_follows_links_and_skips_pycache(tmp_path: Path) -> None:
    """infra.lambda_runtime.tree_bytes, the one rule of every check against Lambda's unzipped
    limit: a link ships its target's bytes (CDK's zip follows it), __pycache__ ships not, a
    link cycle is walked once and a dangling link ships nothing."""
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "mod.py").write_bytes(b"x" * 100)
    (tmp_path / "pkg" / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"y" * 1000)
    (tmp_path / "big.bin").write_bytes(b"z" * 10)
    (tmp_path / "pkg" / "link.bin").symlink_to(tmp_path / "big.bin")
    (tmp_path / "pkg" / "loop").symlink_to(tmp_path / "pkg")
    (tmp_path / "pkg" / "gone").symlink_to(tmp_path / "missing")
    assert tree_bytes(tmp_path / "pkg" / "mod.py") == 100
    assert tree_bytes(tmp_path / "pkg") == 100 + 10  # mod.py and link.bin's target
    assert tree_bytes(tmp_path) == 10 + 100 + 10
