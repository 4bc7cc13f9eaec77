"""Property-based fuzzing of the console-input and dataset-archive doors (issue 15): a mutated
input ends in the door's one error type naming a field (or one ``fasdl.datasets:`` line and
exit 2), or is accepted and valid; it never raises anything else, never half-writes.

Small and derandomized: the plan, workload, platform and flag doors are in
tests/planner/test_fuzz_inputs.py (and bench/fuzz_inputs.py with a larger budget).
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasdl import segments
from fasdl.datasets.__main__ import main as import_dataset
from fasdl.plan import PlanError
from tests.runtime.test_kreduce import make_plan

PLAN = make_plan(2, 1, 2, 3, "hap", samples=50)
FUZZ = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


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


def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


DATASET = {f"{PLAN.workload.dataset}/x.npy": _npy(np.zeros((60, 1, 4, 4), np.uint8)),
           f"{PLAN.workload.dataset}/y.npy": _npy(np.arange(60, dtype=np.int64) % 3)}
VALID_INPUT: dict[str, Any] = {"run_id": "fuzz", "epochs": 2, "dataset": PLAN.workload.dataset}
_values = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=True), st.text(max_size=40),
                    st.sampled_from(["../x", "data/test/", "ok\n", "", "a" * 300]),
                    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5),
                                                                           st.integers(),
                                                                           max_size=2))
_names = st.sampled_from([*segments.INPUT_FIELDS, "epoch", "run-id", "plans", "x"])


@FUZZ
@given(st.dictionaries(_names, _values, max_size=4), st.booleans())
def test_console_input_is_refused_by_field_or_accepted_whole(changes: dict[str, Any],
                                                             keep_valid: bool) -> None:
    execution_input = {**(VALID_INPUT if keep_valid else {}), **changes}
    s3 = DictS3(DATASET)
    try:
        run = segments.start_run({"input": execution_input, "execution": "fuzz"}, s3,
                                 datasets_bucket="d", results_bucket="r", runs_prefix="runs/",
                                 deployed_json=PLAN.to_json(), fingerprint="",
                                 issue_epoch=lambda run_id: 1)
    except (segments.RunStateError, PlanError) as error:
        assert "field" in str(error) or "dataset" in str(error), error
        assert set(s3.objects) == set(DATASET)  # nothing written
        return
    assert segments.parse_run(run) == run and run["segment"]["epoch"] == 1
    assert run["plan_key"] in s3.objects


def _archive(records: bytes) -> bytes:
    """A cifar-10-binary.tar.gz whose every batch holds ``records``."""
    from fasdl.datasets.cifar10 import TEST_FILES, TRAIN_FILES

    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w:gz") as tar:
        for name in (*TRAIN_FILES, *TEST_FILES):
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(records)
            tar.addfile(info, io.BytesIO(records))
    return stream.getvalue()


def _valid_records() -> bytes:
    from fasdl.datasets.cifar10 import RECORD_BYTES

    rng = np.random.default_rng(1)
    rows = rng.integers(0, 256, (2, RECORD_BYTES), dtype=np.uint8)
    rows[:, 0] = rng.integers(0, 10, 2)
    return rows.tobytes()


VALID_ARCHIVE = _archive(_valid_records())


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(VALID_ARCHIVE) - 1), st.integers(0, 255)),
                max_size=4), st.integers(0, len(VALID_ARCHIVE)))
def test_a_damaged_archive_exits_2_and_leaves_the_output_as_it_was(
        capsys: pytest.CaptureFixture[str], flips: list[tuple[int, int]], cut: int) -> None:
    damaged = bytearray(VALID_ARCHIVE[:cut] if cut < len(VALID_ARCHIVE) else VALID_ARCHIVE)
    for offset, value in flips:
        if offset < len(damaged):
            damaged[offset] = value
    with tempfile.TemporaryDirectory() as folder:
        archive, out = Path(folder) / "cifar.tar.gz", Path(folder) / "out"
        archive.write_bytes(bytes(damaged))
        code = import_dataset(["cifar10", str(archive), str(out)])
        err = capsys.readouterr().err
        if code == 0:
            assert {p.name for p in out.iterdir()} == {"train", "test"}
            return
        assert code == 2 and err.startswith("fasdl.datasets: ") and err.count("\n") <= 1
        assert not out.exists()  # all or nothing
        assert sorted(p.name for p in Path(folder).iterdir()) == ["cifar.tar.gz"]
