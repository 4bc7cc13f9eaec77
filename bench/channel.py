"""Shard exchange throughput: channel (encode + put + get + decode) vs the raw client.

Both paths run against the same local server and move the same frame bytes; the raw path
skips framing, crc and the channel layer. Ratio = raw time / channel time (1.0 = no overhead,
goal >= 0.8). Prints a table, then one JSON object as the last line.

    .venv/bin/python -m bench.channel [--sizes 1 10 50 100] [--repeats 3] [--smoke]

``--smoke`` (or FASDL_BENCH_SMOKE=1, bench/smoke.py): 1 MB shards, one repeat (ten transfers).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench.smoke import parse_args
from fasdl.exchange.channel.base import Channel
from fasdl.exchange.channel.factory import build_channel
from fasdl.exchange.wire import decode_shard, encode_shard, encode_shard_into
from local.servers.managed import SeaweedS3Server, ValkeyServer

MB = 2**20
RUN = "bench"
GOAL_RATIO = 0.8


def through_channel(channel: Channel, values: np.ndarray, key: str, iteration: int,
                    buffer: bytearray | None = None) -> float:
    """Encode (into the worker's reused buffer, as fasdl.exchange.kreduce does), put, get,
    decode."""
    started = time.perf_counter()
    channel.put(key, encode_shard_into(buffer, values, run=RUN, iteration=iteration, worker=0,
                                       shard=0))
    data = channel.get(key, time.monotonic() + 120)
    decoded = decode_shard(data, run=RUN, iteration=iteration, shard=0, worker=0,
                           expected_count=values.size, dtype=values.dtype)
    elapsed = time.perf_counter() - started
    assert decoded[-1] == values[-1]
    channel.delete([key])
    return elapsed


def through_raw(put: Callable[[str, bytes], None], get: Callable[[str], bytes],
                delete: Callable[[str], None], payload: bytes, key: str) -> float:
    started = time.perf_counter()
    put(key, payload)
    data = get(key)
    elapsed = time.perf_counter() - started
    assert len(data) == len(payload)
    # Deleted like the channel path's key: a server holding hundreds of MB more on one side
    # served its GETs ~20% slower, which measured the server's memory, not the channel.
    delete(key)
    return elapsed


def raw_operations(backend: str, server: Any, client: Any) -> tuple[
        Callable[[str, bytes], None], Callable[[str], bytes], Callable[[str], None]]:
    if backend == "s3":
        bucket = server.buckets[0]

        def s3_put(key: str, data: bytes) -> None:
            client.put_object(Bucket=bucket, Key=key, Body=data)

        def s3_get(key: str) -> bytes:
            body: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            return body

        def s3_delete(key: str) -> None:
            client.delete_object(Bucket=bucket, Key=key)

        return s3_put, s3_get, s3_delete

    def valkey_put(key: str, data: bytes) -> None:
        client.set(key, data)

    def valkey_get(key: str) -> bytes:
        value: bytes = client.get(key)
        return value

    def valkey_delete(key: str) -> None:
        client.delete(key)

    return valkey_put, valkey_get, valkey_delete


def bench_backend(
    backend: str, server: Any, sizes: list[int], repeats: int
) -> list[dict[str, Any]]:
    session = server.session() if backend == "s3" else None
    channel = build_channel(server.channel_config(prefix="bench/"), session=session)
    client = server.client()
    put, get, delete = raw_operations(backend, server, client)
    rows = []
    try:
        for size_mb in sizes:
            values = np.random.default_rng(size_mb).standard_normal(size_mb * MB // 4)
            values = values.astype(np.float32)
            payload = encode_shard(values, run=RUN, iteration=0, worker=0, shard=0)
            channel_s, raw_s = [], []
            buffer = bytearray(len(payload))  # a worker's upload buffer, kept across steps
            through_channel(channel, values, "warm", 0, buffer)  # warm connections, allocator
            # Small shards take milliseconds: repeat them more so the median means something.
            for repeat in range(repeats * max(1, 10 // size_mb)):  # interleaved: drift hits both
                raw_s.append(through_raw(put, get, delete, payload, f"raw/{size_mb}/{repeat}"))
                channel_s.append(through_channel(channel, values, f"ch/{size_mb}/{repeat}", repeat,
                                                 buffer))
            rows.append({
                "backend": backend, "size_mb": size_mb,
                "raw_s": statistics.median(raw_s), "channel_s": statistics.median(channel_s),
            })
    finally:
        channel.delete_prefix("")
        raw_keys = [f"raw/{size}/{repeat}" for size in sizes
                    for repeat in range(repeats * max(1, 10 // size))]
        if backend == "s3":
            client.delete_objects(Bucket=server.buckets[0], Delete={
                "Objects": [{"Key": key} for key in raw_keys], "Quiet": True})
        else:
            client.delete(*raw_keys)
        channel.close()
        client.close()
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 50, 100])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["valkey", "s3"],
                        choices=["valkey", "s3"])
    args = parse_args(parser, argv, sizes=[1], repeats=1)
    rows: list[dict[str, Any]] = []
    for backend in args.backends:
        server = ValkeyServer() if backend == "valkey" else SeaweedS3Server()
        with server:
            print(f"{backend}: server up in {server.startup_s:.2f} s", flush=True)
            rows += bench_backend(backend, server, args.sizes, args.repeats)
    print(f"\n{'backend':8} {'MB':>5} {'raw s':>8} {'chan s':>8} {'raw MB/s':>9} "
          f"{'chan MB/s':>9} {'ratio':>6}")
    for row in rows:
        row["ratio"] = row["raw_s"] / row["channel_s"]
        print(f"{row['backend']:8} {row['size_mb']:5d} {row['raw_s']:8.3f} "
              f"{row['channel_s']:8.3f} {row['size_mb'] / row['raw_s']:9.1f} "
              f"{row['size_mb'] / row['channel_s']:9.1f} {row['ratio']:6.2f}")
    ratios = {f"{row['backend']}_{row['size_mb']}mb": round(row["ratio"], 3) for row in rows}
    summary = {
        "bench": "channel", "repeats": args.repeats, "goal_ratio": GOAL_RATIO,
        "min_ratio": round(min(ratios.values()), 3), "ratios": ratios,
        "median_s": {f"{r['backend']}_{r['size_mb']}mb": {"raw": round(r["raw_s"], 4),
                     "channel": round(r["channel_s"], 4)} for r in rows},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
