"""A small safetensors codec (https://github.com/huggingface/safetensors, format of 0.8.0), so
the Lambda image needs no extra package: files it writes are byte for byte what
``safetensors.torch.save`` writes for the same tensors and metadata, and ``load`` reads any
file the reference writes in the dtypes below (tests/runtime/test_safetensors_io.py checks
both against the reference package, a dev dependency only).

Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
``{"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [begin, end]}, ...}``
padded with spaces to a multiple of 8, then the tensors' little-endian bytes, contiguous, in
the reference writer's order (by dtype, widest first, then by name), offsets relative to the
end of the header. Nothing is ever unpickled; :func:`load` checks everything (header size and
JSON, unique names, known dtypes, shapes, offsets contiguous from 0 to the end of the file,
each tensor's size) and raises :class:`SafetensorsError` naming the entry that is wrong.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

# the reference's order of dtypes (its Rust enum): it writes wider dtypes first
DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
    "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32, "F32": torch.float32,
    "F64": torch.float64, "I64": torch.int64}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
_RANK = {name: rank for rank, name in enumerate(DTYPES)}
METADATA_KEY = "__metadata__"
LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100_000_000  # the reference's limit
_ENTRY_FIELDS = frozenset({"dtype", "shape", "data_offsets"})


class SafetensorsError(ValueError):
    """Not a valid safetensors file (or tensors that cannot be written); says what is wrong."""


def _little_endian() -> None:
    if sys.byteorder != "little":  # tensors are written as they lie in memory
        raise SafetensorsError("this codec needs a little-endian machine")


def _check_save(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> None:
    for name, tensor in tensors.items():
        if not isinstance(name, str) or name == METADATA_KEY:
            raise SafetensorsError(f"tensor name {name!r} is not a string or is reserved")
        if not isinstance(tensor, torch.Tensor):
            raise SafetensorsError(f"tensor {name!r} is a {type(tensor).__name__}, not a "
                                   "torch.Tensor")
        if tensor.dtype not in _NAMES:
            raise SafetensorsError(f"tensor {name!r} has dtype {tensor.dtype}, not one of "
                                   f"{', '.join(str(d) for d in DTYPES.values())}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise SafetensorsError(f"metadata {key!r}: keys and values must be strings, got "
                                   f"{type(value).__name__}")


def _raw(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes as they lie in a contiguous CPU copy (no copy when it is one)."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().data if flat.numel() else memoryview(b"")


def save(tensors: Mapping[str, torch.Tensor], path: str | Path | None = None,
         metadata: Mapping[str, str] | None = None) -> bytes:
    """The safetensors bytes of ``tensors`` (written to ``path`` too, when given)."""
    _little_endian()
    metadata = dict(metadata or {})
    _check_save(tensors, metadata)
    order = sorted(tensors, key=lambda name: (-_RANK[_NAMES[tensors[name].dtype]], name))
    header: dict[str, Any] = {METADATA_KEY: metadata} if metadata else {}
    pieces: list[memoryview] = []
    offset = 0
    for name in order:
        raw = _raw(tensors[name])
        header[name] = {"dtype": _NAMES[tensors[name].dtype],
                        "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + raw.nbytes]}
        pieces.append(raw)
        offset += raw.nbytes
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    text += b" " * (-len(text) % LENGTH_BYTES)
    if len(text) > MAX_HEADER_BYTES:
        raise SafetensorsError(f"header of {len(text)} bytes exceeds {MAX_HEADER_BYTES}")
    data = b"".join([struct.pack("<Q", len(text)), text, *pieces])
    if path is not None:
        Path(path).write_bytes(data)
    return data


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise SafetensorsError(f"header names {key!r} twice")
        result[key] = value
    return result


def _header(data: memoryview) -> tuple[dict[str, Any], int]:
    """The parsed JSON header and where the tensor bytes begin."""
    if len(data) < LENGTH_BYTES:
        raise SafetensorsError(f"{len(data)} bytes: too short for the 8-byte header length")
    length = struct.unpack("<Q", data[:LENGTH_BYTES])[0]
    if length > MAX_HEADER_BYTES:
        raise SafetensorsError(f"header length {length} exceeds {MAX_HEADER_BYTES} bytes")
    if LENGTH_BYTES + length > len(data):
        raise SafetensorsError(f"header length {length} runs past the end of the "
                               f"{len(data)}-byte file")
    try:
        text = bytes(data[LENGTH_BYTES:LENGTH_BYTES + length]).decode("utf-8")
        header = json.loads(text, object_pairs_hook=_unique_object)
    except (UnicodeDecodeError, ValueError) as error:
        if isinstance(error, SafetensorsError):
            raise
        raise SafetensorsError(f"header is not UTF-8 JSON: {error}") from error
    if not isinstance(header, dict):
        raise SafetensorsError(f"header must be a JSON object, got {type(header).__name__}")
    return header, LENGTH_BYTES + length


def _metadata(header: dict[str, Any]) -> dict[str, str]:
    found = header.pop(METADATA_KEY, None)
    if found is None:
        return {}
    if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
        raise SafetensorsError(f"{METADATA_KEY} must be an object of strings, got "
                               f"{json.dumps(found)[:80]}")
    return dict(found)


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(name: str, entry: object) -> tuple[torch.dtype, list[int], int, int]:
    """dtype, shape, begin and end of one tensor's header entry, each checked."""
    if not isinstance(entry, dict) or set(entry) != _ENTRY_FIELDS:
        raise SafetensorsError(f"tensor {name!r}: entry must have exactly dtype, shape and "
                               f"data_offsets, got {json.dumps(entry)[:80]}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPES:
        raise SafetensorsError(f"tensor {name!r}: dtype {dtype!r} is not supported (known: "
                               f"{', '.join(DTYPES)})")
    if not isinstance(shape, list) or not all(_is_size(n) for n in shape):
        raise SafetensorsError(f"tensor {name!r}: shape must be a list of sizes, got {shape!r}")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_size, offsets))
            or offsets[0] > offsets[1]):
        raise SafetensorsError(f"tensor {name!r}: data_offsets must be [begin, end] with "
                               f"0 <= begin <= end, got {offsets!r}")
    size = math.prod(shape) * torch.empty(0, dtype=DTYPES[dtype]).element_size()
    if offsets[1] - offsets[0] != size:
        raise SafetensorsError(f"tensor {name!r}: data_offsets {offsets} hold "
                               f"{offsets[1] - offsets[0]} bytes, {dtype} {shape} needs {size}")
    return DTYPES[dtype], shape, offsets[0], offsets[1]


def _tensor(data: memoryview, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    if not len(data):
        return torch.empty(shape, dtype=dtype)
    # one copy into fresh (aligned) memory; the tensor owns it
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


def load(source: bytes | bytearray | memoryview | str | Path
         ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors (in the file's order) and the ``__metadata__`` of a safetensors file."""
    _little_endian()
    data = memoryview(source if isinstance(source, bytes | bytearray | memoryview)
                      else Path(source).read_bytes()).cast("B")
    header, start = _header(data)
    metadata = _metadata(header)
    entries = sorted(((name, *_entry(name, entry)) for name, entry in header.items()),
                     key=lambda item: (item[3], item[4]))
    tensors: dict[str, torch.Tensor] = {}
    end = 0
    for name, dtype, shape, begin, stop in entries:
        if begin != end:
            raise SafetensorsError(f"tensor {name!r}: data_offsets begin at {begin}, the "
                                   f"previous tensor ends at {end} (must be contiguous)")
        end = stop
        if start + stop > len(data):
            raise SafetensorsError(f"tensor {name!r}: data_offsets end at {stop}, past the "
                                   f"{len(data) - start} bytes of data")
        tensors[name] = _tensor(data[start + begin:start + stop], dtype, shape)
    if start + end != len(data):
        raise SafetensorsError(f"{len(data) - start - end} bytes after the last tensor (the "
                               f"data must end where the last tensor does)")
    return tensors, metadata
