"""How the flat parameter vector is cut: K shards (one per aggregator), each in C chunks."""

from __future__ import annotations


def shard_bounds(total: int, shards: int) -> list[tuple[int, int]]:
    """K contiguous [start, end) ranges covering ``total`` elements, sizes differ by <= 1."""
    if shards < 1 or total < shards:
        raise ValueError(f"cannot cut {total} parameters into {shards} non-empty shards")
    base, extra = divmod(total, shards)
    bounds: list[tuple[int, int]] = []
    start = 0
    for index in range(shards):
        end = start + base + (1 if index < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def chunk_bounds(start: int, end: int, chunks: int) -> list[tuple[int, int]]:
    """[start, end) cut into ``chunks`` contiguous ranges (the pipelined exchange's chunks)."""
    return [(start + low, start + high) for low, high in shard_bounds(end - start, chunks)]
