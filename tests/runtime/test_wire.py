"""Shard frames: round trips, and every way a frame must be refused."""

from __future__ import annotations

import struct
from typing import TypedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasdl.exchange.wire import (
    HEADER_SIZE,
    FrameError,
    decode_shard,
    encode_shard,
    encode_shard_into,
    read_header,
    reframe,
    run_digest,
)

RUN = "run-7"


class Ids(TypedDict):
    run: str
    iteration: int
    shard: int


IDS: Ids = {"run": RUN, "iteration": 5, "shard": 2}


def frame(
    values: np.ndarray | None = None, *, run: str = RUN, iteration: int = 5, worker: int = 3,
    shard: int = 2,
) -> bytes:
    array = np.arange(10, dtype=np.float32) if values is None else values
    return encode_shard(array, run=run, iteration=iteration, worker=worker, shard=shard)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_trip_is_a_view_on_the_frame(dtype: type[np.floating]) -> None:
    values = np.linspace(-1.0, 1.0, 1001, dtype=dtype)
    data = frame(values)
    assert len(data) == HEADER_SIZE + values.nbytes
    decoded = decode_shard(data, **IDS, worker=3, expected_count=1001, dtype=dtype)
    np.testing.assert_array_equal(decoded, values)
    assert decoded.dtype == np.dtype(dtype)
    assert not decoded.flags.owndata  # zero-copy view on the received bytes


def test_big_endian_and_strided_input_are_normalized() -> None:
    values = np.arange(20, dtype=">f8")[::2]
    decoded = decode_shard(frame(values), **IDS)
    np.testing.assert_array_equal(decoded, np.arange(0, 20, 2, dtype=np.float64))


def test_empty_shard_round_trips() -> None:
    decoded = decode_shard(frame(np.zeros(0, np.float32)), **IDS, expected_count=0)
    assert decoded.size == 0


def test_header_fields() -> None:
    header = read_header(frame())
    assert (header.iteration, header.worker, header.shard, header.count) == (5, 3, 2, 10)
    assert header.run_digest == run_digest(RUN)
    assert header.dtype == np.dtype(np.float32)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (np.zeros((2, 3), np.float32), "1-D"),
        (np.zeros(3, np.int32), "float32, float64 or bfloat16 bits"),
        (np.zeros(3, np.float16), "float32, float64 or bfloat16 bits"),
    ],
)
def test_encode_refuses_bad_arrays(values: np.ndarray, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        frame(values)


@pytest.mark.parametrize("field", ["iteration", "worker", "shard"])
def test_encode_refuses_negative_ids(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        frame(**{field: -1})  # type: ignore[arg-type]


def test_truncated_frames() -> None:
    data = frame()
    with pytest.raises(FrameError, match=r"truncated frame: 10 bytes, expected at least"):
        decode_shard(data[:10], **IDS)
    with pytest.raises(FrameError, match=r"truncated frame: payload of 36 bytes, expected 40"):
        decode_shard(data[:-4], **IDS)
    with pytest.raises(FrameError, match=r"oversized frame"):
        decode_shard(data + b"\0\0\0\0", **IDS)


@pytest.mark.parametrize("position", [HEADER_SIZE + 7, 20, 40])
def test_flipped_bit_is_caught_by_the_crc(position: int) -> None:
    corrupted = bytearray(frame())
    corrupted[position] ^= 0x10
    with pytest.raises(FrameError, match="corrupted frame: crc32c"):
        decode_shard(bytes(corrupted), **IDS)


def test_every_single_bit_flip_of_the_whole_frame_is_refused() -> None:
    """Header bytes 52-63 are padding outside the crc: they must be zero, so a flip there is
    refused too (it was accepted, harmlessly, before)."""
    intact = frame()
    for position in range(len(intact)):
        for bit in range(8):
            corrupted = bytearray(intact)
            corrupted[position] ^= 1 << bit
            with pytest.raises(FrameError):
                decode_shard(bytes(corrupted), **IDS)
    padded = bytearray(intact)
    padded[60] = 1
    with pytest.raises(FrameError, match="padding bytes are not zero"):
        decode_shard(bytes(padded), **IDS)


def test_bad_magic_version_and_dtype_code() -> None:
    data = bytearray(frame())
    with pytest.raises(FrameError, match="not a shard frame"):
        decode_shard(b"XXXX" + bytes(data[4:]), **IDS)
    data[4] = 9
    with pytest.raises(FrameError, match="unsupported frame version 9, expected 2"):
        decode_shard(bytes(data), **IDS)
    data = bytearray(frame())
    data[5] = 7
    with pytest.raises(FrameError, match="unknown dtype code 7"):
        decode_shard(bytes(data), **IDS)


def test_stale_and_future_iterations_are_refused() -> None:
    with pytest.raises(FrameError, match="stale frame: iteration 4, expected 5"):
        decode_shard(frame(iteration=4), **IDS)
    with pytest.raises(FrameError, match="frame from the future: iteration 6, expected 5"):
        decode_shard(frame(iteration=6), **IDS)


def test_wrong_identity_is_refused() -> None:
    with pytest.raises(FrameError, match="another run"):
        decode_shard(frame(run="run-8"), **IDS)
    with pytest.raises(FrameError, match="wrong shard: frame holds shard 1, expected 2"):
        decode_shard(frame(shard=1), **IDS)
    with pytest.raises(FrameError, match="wrong worker: frame is from worker 3, expected 4"):
        decode_shard(frame(), **IDS, worker=4)


def test_chunks_carry_their_index_and_the_wrong_one_is_refused() -> None:
    values = np.arange(4, dtype=np.float32)
    chunk = encode_shard(values, run=RUN, iteration=5, worker=3, shard=2, chunk=7)
    assert read_header(chunk).chunk == 7 and read_header(frame()).chunk == 0
    assert np.array_equal(decode_shard(chunk, **IDS, chunk=7), values)
    with pytest.raises(FrameError, match="wrong chunk: frame holds chunk 7 of shard 2, expected 6"):
        decode_shard(chunk, **IDS, chunk=6)
    with pytest.raises(FrameError, match="wrong chunk: frame holds chunk 0 of shard 2, expected 1"):
        decode_shard(frame(), **IDS, chunk=1)  # a whole shard is not a chunk
    with pytest.raises(ValueError, match="chunk must be in"):
        encode_shard(values, run=RUN, iteration=5, worker=3, shard=2, chunk=1 << 16)
    flipped = bytearray(chunk)
    flipped[6] ^= 1  # the chunk index is covered by the crc
    with pytest.raises(FrameError, match="corrupted frame"):
        decode_shard(bytes(flipped), **IDS, chunk=6)


def test_wrong_length_and_dtype_are_refused() -> None:
    with pytest.raises(FrameError, match="wrong length: frame holds 10 values, expected 11"):
        decode_shard(frame(), **IDS, expected_count=11)
    with pytest.raises(FrameError, match="wrong dtype: frame holds float32, expected float64"):
        decode_shard(frame(), **IDS, dtype=np.float64)


def test_frame_error_is_a_value_error() -> None:
    assert issubclass(FrameError, ValueError)


def test_payload_is_little_endian() -> None:
    data = frame(np.array([1.0], dtype=np.float64))
    assert struct.unpack_from("<d", data, HEADER_SIZE) == (1.0,)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 5000),
    double=st.booleans(),
    run=st.text(min_size=1, max_size=40),
    iteration=st.integers(0, 2**64 - 1),
    worker=st.integers(0, 2**32 - 1),
    shard=st.integers(0, 2**32 - 1),
    seed=st.integers(0, 2**32 - 1),
)
def test_round_trip_property(
    size: int, double: bool, run: str, iteration: int, worker: int, shard: int, seed: int
) -> None:
    dtype = np.float64 if double else np.float32
    values = np.random.default_rng(seed).standard_normal(size).astype(dtype)
    data = encode_shard(values, run=run, iteration=iteration, worker=worker, shard=shard)
    decoded = decode_shard(
        data, run=run, iteration=iteration, shard=shard, worker=worker, expected_count=size,
        dtype=dtype,
    )
    np.testing.assert_array_equal(decoded, values)


def test_encode_into_a_kept_buffer_equals_encode_and_reuses_it() -> None:
    values = np.arange(1000, dtype=np.float32)
    frame = encode_shard_into(None, values, run="r", iteration=3, worker=1, shard=2)
    assert bytes(frame) == encode_shard(values, run="r", iteration=3, worker=1, shard=2)
    again = encode_shard_into(frame, values[::-1], run="r", iteration=4, worker=1, shard=2)
    assert again is frame  # same size: the buffer is reused, no new allocation
    np.testing.assert_array_equal(
        decode_shard(again, run="r", iteration=4, shard=2, worker=1), values[::-1])
    resized = encode_shard_into(frame, values[:10], run="r", iteration=5, worker=1, shard=2)
    assert resized is not frame and len(resized) == HEADER_SIZE + 40
    with pytest.raises(FrameError, match="stale frame"):  # the old header never survives
        decode_shard(resized, run="r", iteration=6, shard=2, worker=1)


def test_reframe_keeps_the_identity_it_is_not_told_to_change() -> None:
    original = frame()
    assert reframe(original) == original
    halved = reframe(original, np.arange(10, dtype=np.float32) * 0.5)  # a diverged writer's
    assert halved == frame(np.arange(10, dtype=np.float32) * 0.5)
    zombie = reframe(original, run="run-6")  # an older attempt's, same values
    assert zombie == frame(run="run-6")
    with pytest.raises(FrameError, match="another run"):
        decode_shard(zombie, **IDS)
