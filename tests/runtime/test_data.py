"""Dataset format, ranged partition reads, caching, shuffling, cursors, dataset builders."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fasdl.contract.errors import DatasetError
from fasdl.datasets import build_digits, import_cifar10_binary
from fasdl.datasets.cifar10 import RECORD_BYTES
from fasdl.training.augment import to_tensors
from fasdl.training.data import (
    BatchStream,
    DataCursor,
    LocalFiles,
    Partition,
    epoch_order,
    load_partition,
    partition_bounds,
    plan_partition,
    read_layout,
    read_rows,
    s3_range_reader,
    write_dataset,
)
from tests.runtime.kreduce_helpers import make_plan


class CountingReader(LocalFiles):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.calls: list[tuple[str, int, int]] = []

    def __call__(self, key: str, start: int, end: int) -> bytes:
        self.calls.append((key, start, end))
        return super().__call__(key, start, end)


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (100, 3, 4, 4), dtype=np.uint8)
    y = rng.integers(0, 10, 100).astype(np.int64)
    write_dataset(tmp_path / "ds", x, y)
    return tmp_path, x, y


def test_ranged_read_fetches_only_the_header_and_the_rows(
        dataset: tuple[Path, np.ndarray, np.ndarray]) -> None:
    root, x, _ = dataset
    reader = CountingReader(root)
    rows = read_rows(reader, "ds/x.npy", 10, 25)
    assert np.array_equal(rows, x[10:25])
    payload = [call for call in reader.calls if call[1] > 0]
    assert len(payload) == 1 and payload[0][2] - payload[0][1] == 15 * 48


def test_version_2_headers_and_float32_rows(tmp_path: Path) -> None:
    x = np.arange(60, dtype=np.float32).reshape(20, 3)
    with (tmp_path / "x.npy").open("wb") as handle:
        np.lib.format.write_array(handle, x, version=(2, 0), allow_pickle=False)
    layout = read_layout(LocalFiles(tmp_path), "x.npy")
    assert layout.shape == (20, 3) and layout.row_bytes == 12
    assert np.array_equal(read_rows(LocalFiles(tmp_path), "x.npy", 5, 7), x[5:7])


def test_object_and_fortran_arrays_are_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "f.npy", np.asfortranarray(np.ones((3, 2), dtype=np.float32)))
    with pytest.raises(DatasetError, match="Fortran"):
        read_layout(LocalFiles(tmp_path), "f.npy")
    np.save(tmp_path / "o.npy", np.array([{}, 1], dtype=object), allow_pickle=True)
    with pytest.raises(DatasetError, match="object"):
        read_layout(LocalFiles(tmp_path), "o.npy")
    (tmp_path / "junk.npy").write_bytes(b"not an array at all")
    with pytest.raises(DatasetError, match=r"not a \.npy"):
        read_layout(LocalFiles(tmp_path), "junk.npy")


def test_s3_reader_sends_http_range(dataset: tuple[Path, np.ndarray, np.ndarray]) -> None:
    root, x, _ = dataset
    ranges: list[str] = []

    class FakeS3:
        def get_object(self, **kwargs: Any) -> dict[str, Any]:
            ranges.append(kwargs["Range"])
            first, last = (int(v) for v in kwargs["Range"].removeprefix("bytes=").split("-"))
            data = (root / kwargs["Key"]).read_bytes()[first:last + 1]
            return {"Body": io.BytesIO(data)}

    rows = read_rows(s3_range_reader(FakeS3(), "bucket"), "ds/x.npy", 3, 5)
    assert np.array_equal(rows, x[3:5]) and ranges[0] == "bytes=0-11"


def test_partitions_cover_the_dataset_and_are_cached(
        dataset: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path) -> None:
    root, x, y = dataset
    plan = make_plan(3, 1, 4, 6, "hap", samples=100)
    sizes = plan.partition_sizes()
    bounds = [partition_bounds(sizes, w) for w in range(3)]
    assert bounds == [plan_partition(plan, w) for w in range(3)]
    assert bounds[0][0] == 0 and bounds[-1][1] == 100
    reader = CountingReader(root)
    cache = tmp_path / "tmp-cache"
    parts = [load_partition(reader, "ds", start, end, cache) for start, end in bounds]
    assert np.array_equal(np.concatenate([p.x for p in parts]), x)
    assert np.array_equal(np.concatenate([p.y for p in parts]), y)
    calls = len(reader.calls)
    again = load_partition(reader, "ds", *bounds[1], cache)  # a warm invocation
    assert len(reader.calls) == calls and np.array_equal(again.x, parts[1].x)


def test_shuffle_is_deterministic_per_seed_epoch_worker() -> None:
    assert np.array_equal(epoch_order(50, 1, 2, 3), epoch_order(50, 1, 2, 3))
    assert not np.array_equal(epoch_order(50, 1, 2, 3), epoch_order(50, 1, 3, 3))
    assert not np.array_equal(epoch_order(50, 1, 2, 3), epoch_order(50, 1, 2, 4))
    assert sorted(epoch_order(50, 1, 2, 3)) == list(range(50))


def test_cursor_restores_the_batch_sequence() -> None:
    partition = Partition(np.arange(20, dtype=np.uint8).reshape(20, 1),
                          np.arange(20, dtype=np.int64))
    stream = BatchStream(partition, 3, 5, seed=4, worker=1)
    batches = [stream.next_batch()[1] for _ in range(12)]
    assert stream.cursor == DataCursor(2, 2)
    epoch0 = np.concatenate(batches[:5])
    assert len(set(epoch0.tolist())) == 15  # no row twice within an epoch
    saved = DataCursor.from_dict(BatchStream(partition, 3, 5, seed=4, worker=1).cursor.to_dict())
    resumed = BatchStream(partition, 3, 5, seed=4, worker=1, cursor=DataCursor(1, 2))
    assert saved == DataCursor()
    for expected in batches[7:]:
        assert np.array_equal(resumed.next_batch()[1], expected)
    with pytest.raises(DatasetError):
        DataCursor.from_dict({"epoch": -1, "position": 0})
    with pytest.raises(DatasetError, match="cannot feed"):
        BatchStream(partition, 3, 7, seed=0, worker=0)


def test_to_tensors_scales_pixels() -> None:
    x, y = to_tensors(np.array([[0, 255]], dtype=np.uint8), np.array([1], dtype=np.int64))
    assert x.tolist() == [[0.0, 1.0]] and y.tolist() == [1]


def _cifar_archive(path: Path, records_per_file: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(1)
    content: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with tarfile.open(path, "w:gz") as tar:
        names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
        for name in names:
            labels = rng.integers(0, 10, records_per_file).astype(np.uint8)
            pixels = rng.integers(0, 256, (records_per_file, 3072), dtype=np.uint8)
            raw = np.concatenate([labels[:, None], pixels], axis=1).tobytes()
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
            content[name] = (pixels.reshape(-1, 3, 32, 32), labels.astype(np.int64))
    return content


def test_cifar10_binary_import(tmp_path: Path) -> None:
    content = _cifar_archive(tmp_path / "cifar-10-binary.tar.gz", 4)
    rows = import_cifar10_binary(tmp_path / "cifar-10-binary.tar.gz", tmp_path / "out")
    assert rows == {"train": 20, "test": 4}
    x = np.load(tmp_path / "out" / "train" / "x.npy", allow_pickle=False)
    y = np.load(tmp_path / "out" / "train" / "y.npy", allow_pickle=False)
    assert x.shape == (20, 3, 32, 32) and x.dtype == np.uint8 and y.dtype == np.int64
    assert np.array_equal(x[4:8], content["data_batch_2.bin"][0])
    assert np.array_equal(y[16:], content["data_batch_5.bin"][1])
    test_y = np.load(tmp_path / "out" / "test" / "y.npy", allow_pickle=False)
    assert np.array_equal(test_y, content["test_batch.bin"][1])


def test_cifar10_import_rejects_damaged_archives(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "short.tar.gz", "w:gz") as tar:
        for name in ["data_batch_1.bin"]:
            info = tarfile.TarInfo(name)
            info.size = RECORD_BYTES - 1
            tar.addfile(info, io.BytesIO(b"\0" * info.size))
    with pytest.raises(DatasetError, match="missing"):
        import_cifar10_binary(tmp_path / "short.tar.gz", tmp_path / "out")


def test_digits_dataset(tmp_path: Path) -> None:
    rows = build_digits(tmp_path / "digits", seed=0)
    assert rows["train"] + rows["test"] == 1797 and 350 <= rows["test"] <= 370
    x = np.load(tmp_path / "digits" / "train" / "x.npy", allow_pickle=False)
    y = np.load(tmp_path / "digits" / "test" / "y.npy", allow_pickle=False)
    assert x.dtype == np.uint8 and x.shape[1:] == (1, 8, 8) and x.max() == 255
    assert y.dtype == np.int64 and set(y.tolist()) == set(range(10))
