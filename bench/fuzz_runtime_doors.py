"""Fuzz cases for the console-input (trigger start) and dataset-archive (importer) doors:
strategies and the property each input must meet, shared by tests/runtime/test_fuzz_doors.py
(small, derandomized) and ``python -m bench.fuzz_inputs`` (a larger budget)."""

from __future__ import annotations

import contextlib
import io
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from hypothesis import strategies as st

from fasdl.contract.plan import Deployment, Plan, PlanError, Training, Workload
from fasdl.datasets.__main__ import main as import_dataset
from fasdl.datasets.cifar10 import RECORD_BYTES, TEST_FILES, TRAIN_FILES
from fasdl.run import run_state

PLAN = Plan(workload=Workload(name="fuzz", model="mlp", dataset="data/fuzz", samples=50,
                              dataset_mb=1.0, model_mb=1.0),
            deployment=Deployment(channel="s3", arch="x86_64", memory_mb=1024, workers=2),
            training=Training(aggregators=1, batch_aggregator=2, batch_non_aggregator=3,
                              max_global_batch=100_000, epochs=1, segment_iterations=1000,
                              sync="hap"))


class _Missing(Exception):
    response: ClassVar[dict[str, Any]] = {"Error": {"Code": "NoSuchKey"}}


class DictS3:
    """Just enough of an S3 client over a dict for the trigger's start (pure logic)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = dict(objects)

    def _body(self, key: str) -> bytes:
        if key not in self.objects:
            raise _Missing(key)
        return self.objects[key]

    def get_object(self, *, Bucket: str, Key: str, Range: str | None = None) -> Any:
        data = self._body(Key)
        if Range is not None:
            start, end = (int(n) for n in Range.removeprefix("bytes=").split("-"))
            data = data[start:end + 1]
        return {"Body": io.BytesIO(data)}

    def head_object(self, *, Bucket: str, Key: str) -> Any:
        return {"ContentLength": len(self._body(Key))}

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **_: Any) -> None:
        self.objects[Key] = Body



def _first_epoch(run_id: str, *, supersedes: int | None, call: str) -> int:
    return 1 if supersedes is None else supersedes + 1

def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


DATASET = {f"{PLAN.workload.dataset}/x.npy": _npy(np.zeros((60, 1, 4, 4), np.uint8)),
           f"{PLAN.workload.dataset}/y.npy": _npy(np.arange(60, dtype=np.int64) % 3)}
VALID_INPUT: dict[str, Any] = {"run_id": "fuzz", "epochs": 2, "dataset": PLAN.workload.dataset}
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=True), st.text(max_size=40),
                    st.sampled_from(["../x", "data/fuzz/", "ok\n", "", "a" * 300]),
                    st.lists(st.integers(), max_size=3),
                    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
_NAMES = st.sampled_from([*run_state.INPUT_FIELDS, "epoch", "run-id", "plans", "x"])
CONSOLE_INPUTS = st.tuples(st.dictionaries(_NAMES, _VALUES, max_size=4), st.booleans())


def check_console(case: tuple[dict[str, Any], bool]) -> None:
    """RunStateError/PlanError naming a field with nothing written, or a valid run state."""
    changes, keep_valid = case
    s3 = DictS3(DATASET)
    try:
        run = run_state.start_run({"input": {**(VALID_INPUT if keep_valid else {}), **changes},
                                  "execution": "fuzz"}, s3, datasets_bucket="d",
                                 results_bucket="r", runs_prefix="runs/",
                                 deployed_json=PLAN.to_json(), fingerprint="",
                                 issue_epoch=_first_epoch)
    except (run_state.RunStateError, PlanError) as error:
        assert "field" in str(error) or "dataset" in str(error), error
        assert set(s3.objects) == set(DATASET), "a refused input wrote something"
        return
    assert run_state.parse_run(run) == run and run["segment"]["epoch"] == 1
    assert run["plan_key"] in s3.objects


def _archive(records: bytes) -> bytes:
    """A cifar-10-binary.tar.gz whose every batch holds ``records``."""
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w:gz") as tar:
        for name in (*TRAIN_FILES, *TEST_FILES):
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(records)
            tar.addfile(info, io.BytesIO(records))
    return stream.getvalue()


def _valid_records() -> bytes:
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 256, (2, RECORD_BYTES), dtype=np.uint8)
    rows[:, 0] = rng.integers(0, 10, 2)
    return rows.tobytes()


VALID_ARCHIVE = _archive(_valid_records())
ARCHIVE_DAMAGE = st.tuples(
    st.lists(st.tuples(st.integers(0, len(VALID_ARCHIVE) - 1), st.integers(0, 255)),
             max_size=4), st.integers(0, len(VALID_ARCHIVE)))


def check_archive(case: tuple[list[tuple[int, int]], int]) -> None:
    """Exit 2 with one ``fasdl.datasets:`` line and no output folder, or both splits."""
    flips, cut = case
    damaged = bytearray(VALID_ARCHIVE[:cut])
    for offset, value in flips:
        if offset < len(damaged):
            damaged[offset] = value
    with tempfile.TemporaryDirectory() as folder:
        archive, out = Path(folder) / "cifar.tar.gz", Path(folder) / "out"
        archive.write_bytes(bytes(damaged))
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = import_dataset(["cifar10", str(archive), str(out)])
        if code == 0:
            assert {p.name for p in out.iterdir()} == {"train", "test"}
            return
        message = err.getvalue()
        assert code == 2 and message.startswith("fasdl.datasets: "), (code, message)
        assert message.count("\n") <= 1, message
        assert sorted(p.name for p in Path(folder).iterdir()) == ["cifar.tar.gz"]


def runtime_door_cases() -> dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]]:
    return {"console": (CONSOLE_INPUTS, check_console),
            "archive": (ARCHIVE_DAMAGE, check_archive)}
