"""The pipelined K-REDUCE's communication per role and iteration (runtime: fasdl/pipeline.py).

Every shard travels in C chunks (``training.exchange_chunks``) of s_c = S_m/(K·C) MB. With
t_u = s_c/tp_up(M, s_c) and t_d = s_c/tp_down(M, s_c), one chunk's request each way, and d the
platform's duplex (1: a function's upload and download overlap fully, the default; 0: they
share one link; the profiler measures it), running U seconds of uploads beside D seconds of
downloads takes U ∥ D = max(U, D, (1 − d/2)·(U + D)): both directions share a link of which
each alone gets all (for U = D, d is the share of one hidden by the other). Requests in one
direction follow each other, as the paper's Eq. 3-2..3-4 take them.

- a non-aggregator uploads its K·C chunks of iteration l while it downloads the K·C merged
  chunks of l−1 (HAP):                c_n = (K·C·t_u) ∥ (K·C·t_d)
- an aggregator uploads its K−1 other shards and its merged shard (U_a = K·C·t_u) and
  downloads its shard's W−1 copies and the K−1 other merged shards (D_a = (W+K−2)·C·t_d).
  Its last merged chunk goes up after its last copy came down, and that copy after its
  sender's K·C uploads:               c_a = max(U_a + t_d, U_a ∥ D_a) + t_u
- HAP:  T = max(T_train^a + c_a, T_train^n + c_n)
  BSP:  T = max(T_train^a, T_train^n) + c_a + t_d  (merged l is loaded in iteration l: the
        last merged chunk is downloaded after it is published)

For planner/bounded.py, c_a >= max(floor_a, fixed_a + (W−1)·per_peer) with
floor_a = K·C·t_u + t_d + t_u, fixed_a = (K−1)·C·t_d + t_u and per_peer = C·t_d (equal at
d = 1). C = 1 is the paper's phased exchange (planner.cost_model.communication_times).
The exchange's memory is the phased exchange's at most (chunk frames within the same cap, a
one-chunk accumulator), so the planner keeps the phased term (planner/memory.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from planner.profiles import Direction, PlatformProfile

FloatArray = NDArray[np.float64]
# The chunk counts the pipelined pattern's search tries: each doubles the requests of the one
# before; past 16 a ResNet-50 chunk is under 6 MB, where latency, not bytes, sets the time.
CHUNK_CHOICES: tuple[int, ...] = (2, 4, 8, 16)
VALUES_PER_MB = 2**20 // 4  # float32 parameters


@dataclass(frozen=True)
class PipelinedTerms:
    """Per-iteration seconds of the pipelined exchange (arrays over configurations).

    t_u, t_d move a float32 chunk (merged chunks always); t'_u, t'_d a worker's chunk as it
    travels (bfloat16 uploads: half its bytes; float32: t' = t).
    """

    chunks: int
    aggregators: FloatArray    # K
    duplex: FloatArray         # d at each configuration's memory
    chunk_up_s: FloatArray     # t_u
    chunk_down_s: FloatArray   # t_d
    sent_up_s: FloatArray      # t'_u
    sent_down_s: FloatArray    # t'_d
    uploads_n: FloatArray      # a non-aggregator's K·C·t'_u
    downloads_n: FloatArray    # a non-aggregator's K·C·t_d
    floor_a: FloatArray        # K·C·t'_u + t'_d + t_u
    fixed_a: FloatArray        # (K−1)·C·t_d + t_u
    per_peer: FloatArray       # C·t'_d
    non_aggregator: FloatArray  # c_n = (K·C·t'_u) ∥ (K·C·t_d)

    def aggregator_transfers(self, workers: ArrayLike) -> tuple[FloatArray, FloatArray]:
        """An aggregator's (U_a, D_a) = ((K−1)·C·t'_u + C·t_u, (W−1)·C·t'_d + (K−1)·C·t_d):
        its K−1 other shards and its merged one up, its shard's W−1 copies and the K−1 other
        merged shards down; 0 for a single worker."""
        w = np.asarray(workers, dtype=np.float64)
        others = (self.aggregators - 1.0) * self.chunks
        up = others * self.sent_up_s + self.chunks * self.chunk_up_s
        down = (w - 1.0) * self.chunks * self.sent_down_s + others * self.chunk_down_s
        alone = w <= 1
        return (np.asarray(np.where(alone, 0.0, up), dtype=np.float64),
                np.asarray(np.where(alone, 0.0, down), dtype=np.float64))

    def aggregator(self, workers: ArrayLike) -> FloatArray:
        """c_a for W workers; 0 for a single worker."""
        up, down = self.aggregator_transfers(workers)
        chain = self.uploads_n + self.sent_down_s  # the last copy, after its sender's uploads
        value = np.maximum(chain, both_ways(up, down, self.duplex)) + self.chunk_up_s
        return np.asarray(np.where(np.asarray(workers) > 1, value, 0.0), dtype=np.float64)


def pipelined_terms(platform: PlatformProfile, memory_mb: ArrayLike, model_mb: float,
                    aggregators: ArrayLike, chunks: int, upload_share: float = 1.0
                    ) -> PipelinedTerms:
    """The terms at memory M with K aggregators and C chunks per shard (broadcasting);
    ``upload_share``: a worker's chunk's bytes over float32's (Problem.upload_share)."""
    k = np.asarray(aggregators, dtype=np.float64)
    chunk_mb = model_mb / (k * chunks)

    def seconds(way: Direction, megabytes: FloatArray) -> FloatArray:
        return np.asarray(platform.transfer_time(way, memory_mb, megabytes), dtype=np.float64)

    up, down = seconds("up", chunk_mb), seconds("down", chunk_mb)
    sent_up, sent_down = ((up, down) if upload_share == 1.0 else
                          (seconds("up", chunk_mb * upload_share),
                           seconds("down", chunk_mb * upload_share)))
    per_shard = float(chunks)
    uploads, downloads = k * per_shard * sent_up, k * per_shard * down
    duplex = platform.duplex_at(memory_mb)
    return PipelinedTerms(
        chunks=chunks, aggregators=k, duplex=duplex, chunk_up_s=up, chunk_down_s=down,
        sent_up_s=sent_up, sent_down_s=sent_down, uploads_n=uploads, downloads_n=downloads,
        floor_a=uploads + sent_down + up,
        fixed_a=(k - 1.0) * per_shard * down + up,
        per_peer=np.asarray(per_shard * sent_down, dtype=np.float64),
        non_aggregator=both_ways(uploads, downloads, duplex),
    )


def both_ways(up: ArrayLike, down: ArrayLike, duplex: ArrayLike) -> FloatArray:
    """U ∥ D: seconds of ``up`` of uploads beside ``down`` of downloads, max(U, D,
    (1 − d/2)·(U + D)); the local emulator shapes the same (local/shaping.py)."""
    u, v = np.asarray(up, dtype=np.float64), np.asarray(down, dtype=np.float64)
    d = np.asarray(duplex, dtype=np.float64)
    return np.asarray(np.maximum(np.maximum(u, v), (1.0 - d / 2.0) * (u + v)),
                      dtype=np.float64)


def largest_chunks(model_mb: float, most_aggregators: int) -> int:
    """The most chunks every shard of the grid can be cut into (one value each at least)."""
    return max(0, int(model_mb * VALUES_PER_MB) // max(1, most_aggregators))


def chunk_choices(model_mb: float, most_aggregators: int) -> tuple[int, ...]:
    """CHUNK_CHOICES a shard of S_m/K for every K up to ``most_aggregators`` can hold."""
    limit = largest_chunks(model_mb, most_aggregators)
    return tuple(c for c in CHUNK_CHOICES if c <= limit)
