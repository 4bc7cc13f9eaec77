"""fasdl.contract.json_input: bytes -> UTF-8 -> JSON within limits, one error type naming the
source."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fasdl.contract.json_input import (
    MAX_NUMBER_CHARS,
    JsonInputError,
    load_json_bytes,
    nesting_depth,
    read_json_file,
    unknown_field_message,
)


def load(data: bytes | str, max_bytes: int = 1000, max_depth: int = 4) -> object:
    return load_json_bytes(data, what="test input", max_bytes=max_bytes, max_depth=max_depth)


def test_valid_documents_decode() -> None:
    assert load(b'{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert load('\ufeff{"a": "\u00e9"}'.encode()) == {"a": "\u00e9"}  # a BOM is tolerated
    assert load('["[{", "\\"]"]', max_depth=1) == ["[{", '"]']  # brackets in strings


@pytest.mark.parametrize(("data", "fragment"), [
    (b'{"a": "\xe9"}', "is not UTF-8"),
    ('"\ud800"', "is not UTF-8"),  # a lone surrogate in a str
    (b"[" * 5 + b"]" * 5, "nests 5 levels"),
    (b"[" * 100_000 + b"]" * 100_000, "larger than"),
    (b"1" * (MAX_NUMBER_CHARS + 1), f"number of {MAX_NUMBER_CHARS + 1} characters"),
    (b"[1" + b"0" * 5000 + b"]", "number of 5001 characters"),
    (b"1e400", "outside the range"),
    (b"[NaN]", "NaN"),
    (b"-Infinity", "Infinity"),
    (b'{"a": 1, "a": 2}', "repeats the key 'a'"),
    (b"{nope", "is not valid JSON"),
    (b"", "is not valid JSON"),
])
def test_bad_input_is_one_error_naming_the_source(data: bytes | str, fragment: str) -> None:
    with pytest.raises(JsonInputError) as caught:
        load(data, max_bytes=1000 if len(data) < 1000 else 10_000)
    assert fragment in str(caught.value)
    assert str(caught.value).startswith("test input")
    assert caught.value.source == "test input"


def test_deep_nesting_within_the_size_limit_is_refused_before_parsing() -> None:
    with pytest.raises(JsonInputError, match="nests 20000 levels"):
        load(b"[" * 20_000 + b"]" * 20_000, max_bytes=100_000)
    assert nesting_depth('{"a": [[1]], "b": "]]]"}') == 3


def test_files_are_read_with_a_cap(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b'{"k": 1}')
    assert read_json_file(path, what="file", max_bytes=100, max_depth=2) == {"k": 1}
    path.write_bytes(b" " * 200 + b"{}")
    with pytest.raises(JsonInputError, match="larger than 100 bytes"):
        read_json_file(path, what="file", max_bytes=100, max_depth=2)
    with pytest.raises(JsonInputError, match="cannot read file"):
        read_json_file(tmp_path / "missing.json", what="file", max_bytes=100, max_depth=2)
    with pytest.raises(JsonInputError, match="cannot read file"):
        read_json_file(tmp_path, what="file", max_bytes=100, max_depth=2)
    os.mkfifo(tmp_path / "fifo")  # refused, not waited on
    with pytest.raises(JsonInputError, match="not a file"):
        read_json_file(tmp_path / "fifo", what="file", max_bytes=100, max_depth=2)


def test_unknown_field_message_suggests_a_near_miss() -> None:
    message = unknown_field_message("memroy_mb", ["memory_mb", "workers"])
    assert "did you mean 'memory_mb'?" in message
    assert "did you mean" not in unknown_field_message("zzz", ["memory_mb", "workers"])
