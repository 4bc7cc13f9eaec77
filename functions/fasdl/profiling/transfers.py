"""The profiler's transfer samples: shard frames through a channel, and its duplex.

fasdl.profiling.measure's module docstring describes the records; this module takes them. Each
function leaves no key behind.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from fasdl.exchange.channel.base import Channel
from fasdl.exchange.cpu_cost import bf16_fold_cpu_s, bf16_frame_cpu_s, fold_cpu_s
from fasdl.exchange.wire import decode_shard, encode_shard

DUPLEX_MAX_MB = 16.0  # the duplex test's largest size: a pipelined chunk's order


def lambda_arch() -> str:
    return "arm64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"


def measure_transfers(channel: Channel, name: str, memory_mb: float, sizes_mb: Sequence[float],
                      repeats: int, prefix: str) -> list[dict[str, Any]]:
    """Up/down ``transfer`` records through one channel; its keys are deleted afterwards."""
    records: list[dict[str, Any]] = []
    keys = [f"{prefix}warmup"]
    channel.put(keys[0], b"x")  # opens the connection (TLS, DNS) outside the timings
    channel.try_get(keys[0])
    arch = lambda_arch()
    try:
        for size in sizes_mb:
            # random values: nothing on the way compresses them
            values = np.frombuffer(os.urandom(int(size * 2**20) // 4 * 4), dtype="<f4")
            for attempt in range(repeats):
                key = f"{prefix}{size:g}MB-{attempt}"
                keys.append(key)
                # timed as workers exchange shards: framing + crc on the way up, crc + checks
                # on the way down; that CPU scales with M like the transfer does
                start, cpu = time.perf_counter(), time.process_time()
                channel.put(key, encode_shard(values, run=prefix, iteration=attempt, worker=0,
                                              shard=0))
                up, up_cpu = time.perf_counter() - start, time.process_time() - cpu
                start, cpu = time.perf_counter(), time.process_time()
                data = channel.try_get(key)
                if data is None:
                    raise RuntimeError(f"{name}: read back {key!r} missing")
                decoded = decode_shard(data, run=prefix, iteration=attempt, shard=0, worker=0,
                                       expected_count=values.size, dtype=values.dtype)
                down, down_cpu = time.perf_counter() - start, time.process_time() - cpu
                if decoded.size != values.size:
                    raise RuntimeError(f"{name}: read back {key!r} incomplete")
                for direction, seconds, cpu_s in (("up", up, up_cpu), ("down", down, down_cpu)):
                    records.append({"kind": "transfer", "memory_mb": memory_mb,
                                    "channel": name, "direction": direction,
                                    "size_mb": size, "seconds": seconds, "cpu_s": cpu_s,
                                    "arch": arch})
                records[-1]["fold_cpu_s"] = fold_cpu_s(decoded)
                if attempt == 0:  # the codec's arithmetic, once per size, on finite values
                    finite = np.random.default_rng(0).standard_normal(values.size, np.float32)
                    records[-2]["bf16_frame_cpu_s"] = bf16_frame_cpu_s(finite)
                    records[-1]["bf16_fold_cpu_s"] = bf16_fold_cpu_s(finite)
                    del finite
    finally:
        channel.delete(keys)
    return records


def duplex_size_mb(sizes_mb: Sequence[float]) -> float:
    """The size the duplex test moves: the largest profiled size up to 16 MB (a chunk's)."""
    small = [size for size in sizes_mb if size <= DUPLEX_MAX_MB]
    return max(small) if small else min(sizes_mb)


def measure_duplex(channel: Channel, name: str, memory_mb: float, size_mb: float,
                   repeats: int, prefix: str) -> list[dict[str, Any]]:
    """``duplex`` records: an upload of ``size_mb`` and n downloads of it (n balances the two
    times), one after the other, then both at once. A function whose upload and download
    overlap fully takes the longer of the two at once; one shared link, their sum."""
    payload = os.urandom(int(size_mb * 2**20))
    source, keys = f"{prefix}duplex-source", [f"{prefix}duplex-source"]
    channel.put(source, payload)
    records: list[dict[str, Any]] = []

    def downloads(count: int) -> None:
        for _ in range(count):
            _read(channel, source)

    try:
        with ThreadPoolExecutor(2) as pool:
            for attempt in range(repeats):
                up_key, both_key = f"{prefix}duplex-up-{attempt}", f"{prefix}duplex-both-{attempt}"
                keys += [up_key, both_key]
                up = _timed(partial(channel.put, up_key, payload))
                count = max(1, round(up / _timed(partial(downloads, 1))))
                down = _timed(partial(downloads, count))
                start = time.perf_counter()
                upload = pool.submit(channel.put, both_key, payload)
                download = pool.submit(downloads, count)
                upload.result()
                download.result()
                records.append({"kind": "duplex", "memory_mb": memory_mb, "channel": name,
                                "size_mb": size_mb, "downloads": count,
                                "seconds": time.perf_counter() - start, "up_s": up,
                                "down_s": down, "arch": lambda_arch()})
    finally:
        channel.delete(keys)
    return records


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _read(channel: Channel, key: str) -> bytes:
    data = channel.try_get(key)
    if data is None:
        raise RuntimeError(f"read back {key!r} missing")
    return data
