"""The runtime's safetensors codec (fasdl.training.safetensors_io) against the reference
package (safetensors, a dev dependency only): the same bytes written, each reads the other's
files bit for bit, and malformed files are refused with a clear SafetensorsError."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import safetensors.torch
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasdl.training.safetensors_io import (
    DTYPES,
    MAX_HEADER_BYTES,
    SafetensorsError,
    load,
    save,
)


def _tensors() -> dict[str, torch.Tensor]:
    """Every supported dtype, scalars, empty tensors, a transposed (non-contiguous) view."""
    generator = torch.Generator().manual_seed(1)
    found = {f"t.{name.lower()}": (torch.randn(3, 5, generator=generator) * 50).to(dtype)
             for name, dtype in DTYPES.items()}
    found.update({"scalar": torch.tensor(7, dtype=torch.int64), "empty": torch.zeros(0, 4),
                  "transposed": torch.randn(4, 6, generator=generator).t(),
                  "bits": torch.tensor([True, False, True]),
                  "üñí.weight": torch.arange(6, dtype=torch.float16).reshape(2, 3)})
    return found


def _identical(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> None:
    assert set(left) == set(right)
    for name, tensor in left.items():
        other = right[name]
        assert other.dtype == tensor.dtype and other.shape == tensor.shape, name
        # bit for bit, NaNs and signed zeros included
        assert torch.equal(other.reshape(-1).contiguous().view(torch.uint8),
                           tensor.reshape(-1).contiguous().view(torch.uint8)), name


def test_round_trip_keeps_every_bit_and_the_metadata(tmp_path: Path) -> None:
    tensors = _tensors()
    tensors["nan"] = torch.tensor([float("nan"), -0.0, float("inf")])
    data = save(tensors, tmp_path / "m.safetensors", {"format": "pt", "note": "ünïcode"})
    assert (tmp_path / "m.safetensors").read_bytes() == data
    for source in (data, tmp_path / "m.safetensors", str(tmp_path / "m.safetensors")):
        loaded, metadata = load(source)
        _identical(tensors, loaded)
        assert metadata == {"format": "pt", "note": "ünïcode"}
    assert load(save({}))[0] == {}


def test_bytes_equal_the_reference_writer() -> None:
    tensors = _tensors()
    reference = safetensors.torch.save({n: t.contiguous() for n, t in tensors.items()},
                                       metadata={"format": "pt"})
    assert save(tensors, None, {"format": "pt"}) == reference
    assert save(tensors) == safetensors.torch.save(
        {n: t.contiguous() for n, t in tensors.items()})
    length = struct.unpack("<Q", reference[:8])[0]
    assert length % 8 == 0 and reference[8 + length - 1:8 + length] in (b" ", b"}")


def test_each_reads_the_others_files(tmp_path: Path) -> None:
    tensors = {n: t.contiguous() for n, t in _tensors().items()}
    ours = tmp_path / "ours.safetensors"
    save(tensors, ours, {"k": "v"})
    _identical(tensors, safetensors.torch.load_file(str(ours)))
    theirs = tmp_path / "theirs.safetensors"
    safetensors.torch.save_file(tensors, str(theirs), metadata={"k": "v"})
    loaded, metadata = load(theirs)
    _identical(tensors, loaded)
    assert metadata == {"k": "v"}


def test_a_module_state_dict_loads_with_plain_torch(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    model(torch.randn(4, 1, 5, 5))  # running statistics move; num_batches_tracked = 1
    save(model.state_dict(), tmp_path / "model.safetensors")
    fresh = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    fresh.load_state_dict(safetensors.torch.load_file(str(tmp_path / "model.safetensors")))
    _identical(dict(model.state_dict()), dict(fresh.state_dict()))


def test_what_cannot_be_written_is_refused() -> None:
    with pytest.raises(SafetensorsError, match=r"'c' has dtype torch\.complex64"):
        save({"c": torch.zeros(2, dtype=torch.complex64)})
    with pytest.raises(SafetensorsError, match="'__metadata__' is not a string or is reserved"):
        save({"__metadata__": torch.zeros(1)})
    with pytest.raises(SafetensorsError, match="'x' is a list"):
        save({"x": [1.0]})  # type: ignore[dict-item]
    with pytest.raises(SafetensorsError, match="metadata 'k'"):
        save({}, None, {"k": 1})  # type: ignore[dict-item]


def _file(header: object, data: bytes = b"", *, raw: bytes | None = None) -> bytes:
    text = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


GOOD = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "I64", "shape": [], "data_offsets": [8, 16]}}
BODY = bytes(16)


@pytest.mark.parametrize(("data", "message"), [
    (b"\x01\x02", "too short for the 8-byte header length"),
    (struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}", "exceeds 100000000 bytes"),
    (struct.pack("<Q", 64) + b"{}", "runs past the end"),
    (_file(None, raw=b"\xff\xfe{}"), "not UTF-8 JSON"),
    (_file(None, raw=b'{"a": '), "not UTF-8 JSON"),
    (_file([1, 2]), "must be a JSON object, got list"),
    (_file(None, BODY, raw=b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},'
                           b' "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}'),
     "names 'a' twice"),
    (_file({**GOOD, "__metadata__": {"k": 1}}, BODY), "__metadata__ must be an object"),
    (_file({**GOOD, "a": {**GOOD["a"], "dtype": "F8_E4M3"}}, BODY),
     "'a': dtype 'F8_E4M3' is not supported"),
    (_file({**GOOD, "a": {**GOOD["a"], "shape": [-2]}}, BODY), "'a': shape must be"),
    (_file({**GOOD, "a": {**GOOD["a"], "shape": [True]}}, BODY), "'a': shape must be"),
    (_file({**GOOD, "a": {**GOOD["a"], "data_offsets": [8, 0]}}, BODY), "0 <= begin <= end"),
    (_file({**GOOD, "a": {**GOOD["a"], "data_offsets": [0]}}, BODY), "'a': data_offsets must"),
    (_file({**GOOD, "a": {**GOOD["a"], "shape": [3]}}, BODY), r"hold 8 bytes, F32 \[3\] needs 12"),
    (_file({**GOOD, "a": {**GOOD["a"], "extra": 1}}, BODY), "exactly dtype, shape and"),
    (_file({**GOOD, "b": {**GOOD["b"], "data_offsets": [9, 17]}}, BODY + b"\0"),
     "'b': data_offsets begin at 9, the previous tensor ends at 8"),
    (_file({**GOOD, "b": {**GOOD["b"], "data_offsets": [0, 8]}}, BODY), "begin at 0"),
    (_file(GOOD, BODY[:12]), "'b': data_offsets end at 16, past the 12 bytes"),
    (_file(GOOD, BODY + b"tail"), "4 bytes after the last tensor"),
])
def test_malformed_files_are_refused_by_name(data: bytes, message: str) -> None:
    with pytest.raises(SafetensorsError, match=message):
        load(data)


def test_the_good_file_of_the_malformed_cases_loads() -> None:
    tensors, metadata = load(_file(GOOD, BODY))
    assert tensors["a"].tolist() == [0.0, 0.0] and tensors["b"].item() == 0
    assert metadata == {}


_SAMPLE = save(_tensors(), None, {"format": "pt"})
_LENGTH = struct.unpack("<Q", _SAMPLE[:8])[0]
Damage = Callable[[bytes], bytes]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_headers_load_exactly_or_fail_cleanly(data: st.DataObject) -> None:
    """Overwrite, drop or insert a few bytes in the length or the JSON header: the reader
    either reads what the reference reads or raises SafetensorsError, never anything else."""
    damaged = bytearray(_SAMPLE)
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.integers(0, 8 + _LENGTH - 1))
        action = data.draw(st.sampled_from(["set", "drop", "insert"]))
        byte = data.draw(st.sampled_from([*b'{}[]",:0123456789 eFIU', 0, 255]))
        if action == "set":
            damaged[where] = byte
        elif action == "drop":
            del damaged[where]
        else:
            damaged.insert(where, byte)
    try:
        tensors, _ = load(bytes(damaged))
    except SafetensorsError:
        return
    reference = safetensors.torch.load(bytes(damaged))  # it must be a valid file
    _identical(reference, tensors)
