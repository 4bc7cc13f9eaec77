"""Reading a JSON document a user handed us: bytes -> UTF-8 -> JSON, within limits.

Every door that takes a JSON file or payload (the plan into synth and the trigger, workload
and platform profiles into the planner) reads it here first, so the same input fails the same
way everywhere: one :class:`JsonInputError` naming the source, never a UnicodeDecodeError,
RecursionError or the interpreter's integer-digits ValueError. Field validation is the
caller's. Stdlib only: this module runs inside Lambda too.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

# Longest number literal accepted: far beyond any real field (2**64 has 20 digits), far below
# the interpreter's 4300-digit int conversion limit.
MAX_NUMBER_CHARS = 40

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class JsonInputError(ValueError):
    """A JSON input that cannot be read or decoded. ``source`` names what it was (e.g.
    "plan file plan.json"); the message starts with it or names it."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(message)
        self.source = source


def load_json_bytes(data: bytes | str, *, what: str, max_bytes: int, max_depth: int) -> object:
    """Decode ``data`` (UTF-8, an optional BOM allowed) into JSON values.

    Refused with :class:`JsonInputError`: more than ``max_bytes`` bytes, invalid UTF-8,
    nesting deeper than ``max_depth`` arrays/objects, invalid JSON, duplicate object keys,
    NaN/Infinity, numbers longer than :data:`MAX_NUMBER_CHARS` characters or out of the
    float range.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise JsonInputError(what, f"{what} is larger than {max_bytes} bytes, the most "
                                   "accepted")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise JsonInputError(what, f"{what} is not UTF-8 text (invalid byte at offset "
                                   f"{error.start})") from error
    depth = nesting_depth(text)
    if depth > max_depth:
        raise JsonInputError(what, f"{what} nests {depth} levels of arrays/objects, at most "
                                   f"{max_depth} are accepted")
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as error:
        raise JsonInputError(what, f"{what} is not valid JSON: {error}") from error
    except _DecodeError as error:
        raise JsonInputError(what, f"{what} {error}") from error


def read_json_file(path: str | Path, *, what: str, max_bytes: int, max_depth: int) -> object:
    """:func:`load_json_bytes` of a file, reading at most ``max_bytes + 1`` bytes of it."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block, /dev/zero never end
            raise JsonInputError(f"{what} {path}", f"cannot read {what} {path}: not a file")
        with open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as error:
        raise JsonInputError(f"{what} {path}", f"cannot read {what} {path}: "
                                               f"{error.strerror or error}") from error
    return load_json_bytes(raw, what=f"{what} {path}", max_bytes=max_bytes, max_depth=max_depth)


def nesting_depth(text: str) -> int:
    """Deepest array/object nesting of a JSON text (brackets inside strings do not count)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(_STRINGS.sub('""', text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def unknown_field_message(name: str, known: Iterable[str]) -> str:
    """'is not a known field' with a did-you-mean for a near miss, then the known fields."""
    choices = sorted(known)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"is not a known field{hint}; known fields: {', '.join(choices)}"


class _DecodeError(ValueError):
    pass


def _parse_int(literal: str) -> int:
    if len(literal) > MAX_NUMBER_CHARS:
        raise _DecodeError(f"holds a number of {len(literal)} characters, at most "
                           f"{MAX_NUMBER_CHARS} are accepted")
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal) if len(literal) <= MAX_NUMBER_CHARS else math.inf
    if not math.isfinite(value):
        raise _DecodeError(f"holds the number {literal[:MAX_NUMBER_CHARS]}"
                           f"{'...' if len(literal) > MAX_NUMBER_CHARS else ''}, outside the "
                           "range of a double (or longer than "
                           f"{MAX_NUMBER_CHARS} characters)")
    return value


def _reject_constant(name: str) -> float:
    raise _DecodeError(f"holds {name}, which JSON does not allow; use a finite number")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise _DecodeError(f"repeats the key {key!r} in one object; each key once")
        result[key] = value
    return result


__all__ = ["MAX_NUMBER_CHARS", "JsonInputError", "load_json_bytes", "nesting_depth",
           "read_json_file", "unknown_field_message"]
