"""The dataset importer writes both splits or nothing, never over a folder it was not asked
to replace, and answers bad input with one line and exit 2 (python -m fasdl.datasets)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fasdl.contract.errors import DatasetError
from fasdl.datasets import build_digits, import_cifar10_binary
from fasdl.datasets.__main__ import main
from fasdl.datasets.cifar10 import RECORD_BYTES
from fasdl.datasets.output import OutputFolderError
from tests.runtime.cifar_archive import cifar_archive


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".partial-" in p.name or ".old-" in p.name)


def test_a_damaged_test_batch_writes_nothing(tmp_path: Path) -> None:
    archive = cifar_archive(tmp_path / "bad.tar.gz", test_bytes=RECORD_BYTES + 7)
    with pytest.raises(DatasetError, match=r"test_batch\.bin: .* not a multiple"):
        import_cifar10_binary(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # no complete-looking train/ without test/
    assert _leftovers(tmp_path) == []


def test_a_full_folder_is_refused_and_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "test").mkdir(parents=True)
    (out / "test" / "x.npy").write_bytes(b"old")
    with pytest.raises(OutputFolderError, match="not empty; pass --force"):
        build_digits(out)
    assert (out / "test" / "x.npy").read_bytes() == b"old"


def test_force_replaces_the_folder_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "stale").mkdir(parents=True)
    rows = import_cifar10_binary(cifar_archive(tmp_path / "ok.tar.gz"), out, force=True)
    assert rows == {"train": 10, "test": 2}
    assert sorted(p.name for p in out.iterdir()) == ["test", "train"]  # nothing stale left
    assert np.load(out / "test" / "y.npy", allow_pickle=False).shape == (2,)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", ["garbage", "absent"])
def test_cli_bad_archive_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               kind: str) -> None:
    archive = tmp_path / f"{kind}.tar.gz"
    if kind == "garbage":
        archive.write_bytes(b"not a tar")
    assert main(["cifar10", str(archive), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fasdl.datasets: ") and "\n" not in err
    assert "not a readable cifar-10-binary.tar.gz" in err
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_full_folder_then_force_works(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "digits"
    assert main(["digits", str(out)]) == 0
    assert main(["digits", str(out), "--seed", "1"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["digits", str(out), "--seed", "1", "--force"]) == 0
    assert main(["digits", str(tmp_path / "d2"), "--test-fraction", "1.5"]) == 2
