"""Shard framing: a fixed 64-byte header followed by the raw little-endian values.

Header layout (little-endian, ``HEADER``)::

    magic "FSDL" | version u8 | dtype code u8 | chunk u16 | element count u64
    run digest 16 B | iteration u64 | worker u32 | shard u32 | crc32c u32 | padding 12 B

``chunk`` is the frame's part of its shard in the pipelined exchange (fasdl.exchange.pipeline), 0
for a
whole shard; frames written before it existed held 0 there, so they read as chunk 0. The dtype
codes are 1 float32, 2 float64 and 3 bfloat16, whose values travel as the upper 16 bits of
their float32 (``BFLOAT16_BITS``, uint16: fasdl.exchange.codec makes and reads them).

The CRC-32C (Castagnoli, hardware-accelerated via google-crc32c: several times faster than
zlib's crc32, which was a large share of a Valkey round trip; measured: docs/results.md,
"Measurements behind design choices") covers the header fields before it *and* the payload,
and the 12 padding bytes after it must be zero, so a flipped bit anywhere is caught. Decoding
checks the identity fields against what the reader expects: a frame from another run, a stale
iteration or the wrong shard/worker is rejected, never averaged in.
Never pickle: the payload is the array's bytes and nothing else.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import google_crc32c
import numpy as np

from fasdl.contract.fields import is_integral

MAGIC = b"FSDL"
VERSION = 2  # 2: CRC-32C instead of zlib's CRC-32
HEADER = struct.Struct("<4sBBHQ16sQIII12x")
HEADER_SIZE = HEADER.size  # 64: keeps the payload 16-byte aligned inside a bytes object
_CRC_OFFSET = HEADER_SIZE - 16  # the crc covers the header bytes before this offset
_PADDING_OFFSET = _CRC_OFFSET + 4  # zero bytes: checked, as the crc does not cover them
RUN_DIGEST_SIZE = 16

BFLOAT16_BITS: np.dtype[np.generic] = np.dtype("<u2")
_CODE_BY_DTYPE: dict[np.dtype[np.generic], int] = {
    np.dtype("<f4"): 1,
    np.dtype("<f8"): 2,
    BFLOAT16_BITS: 3,
}
_DTYPE_BY_CODE = {code: dtype for dtype, code in _CODE_BY_DTYPE.items()}

_MAX_U16 = 2**16 - 1
_MAX_U32 = 2**32 - 1
_MAX_U64 = 2**64 - 1


class FrameError(ValueError):
    """A frame that must not be used: truncated, corrupted or not the one expected."""


@dataclass(frozen=True)
class FrameHeader:
    """The parsed header of a shard frame."""

    version: int
    dtype: np.dtype[np.generic]
    count: int
    run_digest: bytes
    iteration: int
    worker: int
    shard: int
    crc32: int
    chunk: int = 0

    @property
    def payload_size(self) -> int:
        return self.count * self.dtype.itemsize


def run_digest(run: str | bytes) -> bytes:
    """The fixed-length id of a run as stored in frames (blake2b-128 of its name)."""
    raw = run.encode() if isinstance(run, str) else run
    return hashlib.blake2b(raw, digest_size=RUN_DIGEST_SIZE).digest()


def _check_id(name: str, value: int, maximum: int) -> None:
    if not is_integral(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= int(value) <= maximum:
        raise ValueError(f"{name} must be in [0, {maximum}], got {value}")


def _wire_dtype(dtype: np.dtype[np.generic]) -> np.dtype[np.generic]:
    little = dtype.newbyteorder("<")
    for wire_dtype in _CODE_BY_DTYPE:
        if wire_dtype == little:
            return wire_dtype
    raise TypeError(f"shards must be float32, float64 or bfloat16 bits (uint16), got {dtype}")


def _header_prefix(array: np.ndarray, digest: bytes, iteration: int, worker: int,
                   shard: int, chunk: int = 0) -> tuple[np.ndarray, bytes]:
    """The validated little-endian values and the header bytes the crc starts with."""
    if array.ndim != 1:
        raise ValueError(f"shards must be 1-D, got shape {array.shape}")
    wire_dtype = _wire_dtype(array.dtype)
    _check_id("iteration", iteration, _MAX_U64)
    _check_id("worker", worker, _MAX_U32)
    _check_id("shard", shard, _MAX_U32)
    _check_id("chunk", chunk, _MAX_U16)
    values = np.ascontiguousarray(array, dtype=wire_dtype)
    prefix = HEADER.pack(
        MAGIC, VERSION, _CODE_BY_DTYPE[wire_dtype], int(chunk), values.size, digest,
        int(iteration), int(worker), int(shard), 0,
    )[:_CRC_OFFSET]
    return values, prefix


def encode_shard(
    array: np.ndarray, *, run: str | bytes, iteration: int, worker: int, shard: int,
    chunk: int = 0,
) -> bytes:
    """Frame a 1-D float32/float64 array (one copy: header + little-endian values)."""
    return _frame(*_header_prefix(array, run_digest(run), iteration, worker, shard, chunk))


def reframe(frame: bytes | bytearray | memoryview, values: np.ndarray | None = None, *,
            run: str | bytes | None = None) -> bytes:
    """``frame`` with other ``values`` and/or under another ``run``'s identity, its crc valid.

    Iteration, worker, shard and chunk stay the frame's. What a diverged or older attempt would have
    written at a key a reader looks at (fault injection, tests): it decodes as intact, so only
    the key's namespace or the header's identity can keep it out.
    """
    header = read_header(frame)
    if values is None:
        values = np.frombuffer(frame, dtype=header.dtype, count=header.count, offset=HEADER_SIZE)
    digest = header.run_digest if run is None else run_digest(run)
    return _frame(*_header_prefix(values, digest, header.iteration, header.worker, header.shard,
                                  header.chunk))


def _frame(values: np.ndarray, prefix: bytes) -> bytes:
    crc = _checksum(prefix, values.view(np.uint8))
    return b"".join((prefix, struct.pack("<I12x", crc), values.data.cast("B")))


def encode_shard_into(
    buffer: bytearray | None, array: np.ndarray, *, run: str | bytes, iteration: int,
    worker: int, shard: int, chunk: int = 0,
) -> bytearray:
    """:func:`encode_shard` into ``buffer`` (reused when its size fits, else a new one).

    A worker re-sends same-sized shards every iteration: writing into a buffer it keeps saves
    the fresh allocation's page faults, most of the time framing takes (measured:
    docs/results.md, "Measurements behind design choices"). The caller must not reuse the
    buffer before the channel's put of it has returned.
    """
    values, prefix = _header_prefix(array, run_digest(run), iteration, worker, shard, chunk)
    size = HEADER_SIZE + values.nbytes
    frame = buffer if buffer is not None and len(buffer) == size else bytearray(size)
    payload = np.frombuffer(frame, dtype=np.uint8, offset=HEADER_SIZE)
    payload[:] = values.view(np.uint8)
    frame[:_CRC_OFFSET] = prefix
    frame[_CRC_OFFSET:HEADER_SIZE] = struct.pack("<I12x", _checksum(prefix, payload))
    return frame


def _checksum(prefix: bytes, payload: np.ndarray) -> int:
    """CRC-32C of the header prefix then the payload (a uint8 view: no copy)."""
    return int(google_crc32c.extend(google_crc32c.value(prefix), payload))


def read_header(data: bytes | bytearray | memoryview) -> FrameHeader:
    """Parse and sanity-check the header (magic, version, dtype, length); no crc check."""
    if len(data) < HEADER_SIZE:
        raise FrameError(
            f"truncated frame: {len(data)} bytes, expected at least the {HEADER_SIZE}-byte header"
        )
    magic, version, code, chunk, count, digest, iteration, worker, shard, crc = (
        HEADER.unpack_from(data)
    )
    if magic != MAGIC:
        raise FrameError(f"not a shard frame: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise FrameError(f"unsupported frame version {version}, expected {VERSION}")
    dtype = _DTYPE_BY_CODE.get(code)
    if dtype is None:
        known = ", ".join(f"{c}={d}" for c, d in _DTYPE_BY_CODE.items())
        raise FrameError(f"unknown dtype code {code} in frame, expected one of {known}")
    if any(bytes(memoryview(data)[_PADDING_OFFSET:HEADER_SIZE])):
        raise FrameError("corrupted frame: the header's padding bytes are not zero")
    header = FrameHeader(version, dtype, count, digest, iteration, worker, shard, crc, chunk)
    found = len(data) - HEADER_SIZE
    if found != header.payload_size:
        state = "truncated" if found < header.payload_size else "oversized"
        raise FrameError(
            f"{state} frame: payload of {found} bytes, expected {header.payload_size} "
            f"({count} x {dtype})"
        )
    return header


def decode_shard(
    data: bytes | bytearray | memoryview,
    *,
    run: str | bytes,
    iteration: int,
    shard: int,
    worker: int | None = None,
    expected_count: int | None = None,
    dtype: np.typing.DTypeLike | None = None,
    chunk: int = 0,
) -> np.ndarray:
    """The values of a frame, as a view on ``data`` (read-only when ``data`` is bytes).

    Raises FrameError unless the frame is intact and is exactly the one asked for.
    """
    header = read_header(data)
    view = memoryview(data).cast("B")
    crc = _checksum(bytes(view[:_CRC_OFFSET]),
                    np.frombuffer(view, dtype=np.uint8, offset=HEADER_SIZE))
    if crc != header.crc32:
        raise FrameError(f"corrupted frame: crc32c {crc:#010x}, header says {header.crc32:#010x}")
    expected_digest = run_digest(run)
    if header.run_digest != expected_digest:
        raise FrameError(
            f"frame from another run: digest {header.run_digest.hex()}, expected "
            f"{expected_digest.hex()} (run {run!r})"
        )
    if header.iteration != iteration:
        kind = "stale frame" if header.iteration < iteration else "frame from the future"
        raise FrameError(f"{kind}: iteration {header.iteration}, expected {iteration}")
    if header.shard != shard:
        raise FrameError(f"wrong shard: frame holds shard {header.shard}, expected {shard}")
    if header.chunk != chunk:
        raise FrameError(f"wrong chunk: frame holds chunk {header.chunk} of shard {header.shard}, "
                         f"expected {chunk}")
    if worker is not None and header.worker != worker:
        raise FrameError(f"wrong worker: frame is from worker {header.worker}, expected {worker}")
    if expected_count is not None and header.count != expected_count:
        raise FrameError(
            f"wrong length: frame holds {header.count} values, expected {expected_count}"
        )
    if dtype is not None and header.dtype != _wire_dtype(np.dtype(dtype)):
        raise FrameError(f"wrong dtype: frame holds {header.dtype}, expected {np.dtype(dtype)}")
    return np.frombuffer(view, dtype=header.dtype, count=header.count, offset=HEADER_SIZE)
