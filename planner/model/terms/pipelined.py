"""The pipelined K-REDUCE's communication per role and iteration (runtime:
fasdl/exchange/pipeline.py).

Every shard travels in C chunks (``training.exchange_chunks``) of s_c = S_m/(K·C) MB. With
t_u = s_c/tp_up(M, s_c) and t_d = s_c/tp_down(M, s_c), one chunk's request each way (t'_u,
t'_d: a worker's chunk as it travels, bf16: half the bytes), and d the platform's duplex (1: a
function's upload and download overlap fully, the default; 0: they share one link; the
profiler measures it), running U seconds of uploads beside D seconds of downloads takes
U ∥ D = max(U, D, (1 − d/2)·(U + D)). Requests in one direction follow each other, as the
paper's Eq. 3-2..3-4 take them (and the local emulator shapes them, local/lambda_/shaping.py).

- a non-aggregator uploads its K·C chunks of iteration l (U_n) while it downloads the K·C
  merged chunks of l−1 (HAP):          c_n = (K·C·t'_u) ∥ (K·C·t_d)
- an aggregator uploads its K−1 other shards, then its merged chunks (U_a = (K−1)·C·t'_u +
  C·t_u), and downloads its shard's W−1 copies chunk by chunk, then the K−1 other merged
  shards (D_a = (W−1)·C·t'_d + (K−1)·C·t_d). Merged chunk c goes up once its copies are in:
  after (c+1)·p with p = (W−1)·t'_d on its own link, and after (c+1)·q + t'_d with q the
  upload seconds per chunk of the last sender in step with it (HAP: another aggregator,
  q = (K−1)·t'_u, none at K = 1; BSP: a non-aggregator, q = K·t'_u). Between the two it
  folds the chunk's W copies, f = s_c·(κ_fold + (W−1)·κ_peer)/vCPUs(M), κ_peer = κ_fold
  (bfloat16: the codec's κ_fold16; planner/model/terms/client_cpu.py; 0 where the profile has no CPU
  figures). A pipeline of C chunks through stages x, f and t_u ends
  x + f + t_u + (C−1)·max(x, f, t_u) after it starts, so its last merged chunk is up at
      P = max(U_a, fill(p), fill(q) + t'_d),   fill(x) = x + f + t_u + (C−1)·max(x, f, t_u)
  and the other aggregators' last merged chunk comes down t_d later (K > 1):
      c_a = max(U_a ∥ D_a, P + t_d·[K > 1])
- HAP: non-aggregators run ahead of the aggregators, up to a bound through both roles: a
  non-aggregator's last copy of iteration l (T_n + U_n after its iteration began) reaches
  an aggregator (t'_d), the last merged chunk of l goes up (t_u) and comes down in the
  non-aggregator's iteration l+1 (t_d); two of its iterations span that chain:
      T = max(T_train^a + c_a, T_train^n + c_n, (T_train^n + U_n + t'_d + t_u + t_d)/2)
  BSP: T = max(T_train^a, T_train^n) + max(c_a, c_n, P + t_d)  (merged l loads in l)

For planner/search/bounds.py, with K ≥ 1 and W ≥ 2 (HAP; BSP's c_a is no smaller):
c_a >= max(floor_a, fixed_a + (W−1)·per_peer), floor_a = max(U_a, fill((K−1)·t'_u) + t'_d
[K > 1]) + t_d·[K > 1], fixed_a = max((K−1)·C·t_d, t_u + t_d·[K > 1]) (D_a and fill(p) >= C·p +
t_u) and per_peer = C·t'_d. C = 1 is the paper's phased exchange
(planner.model.terms.cost_model.communication_times). The exchange's memory is the phased
exchange's at most (chunk frames within max(C, r·f), the phased exchange's peak with its one
whole-shard download: fasdl.exchange.inflight.pipelined_cap_bytes; a one-chunk accumulator), so
the planner keeps the phased term (planner/model/terms/memory.py). Below that peak the downloads
of chunks overlap their folds, as the pipeline above assumes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from planner.model.inputs.profiles import Direction, PlatformProfile, lambda_vcpus
from planner.model.terms.client_cpu import codec_cpu_per_mb

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
    floor_a: FloatArray        # c_a's floor in W (module docstring)
    fixed_a: FloatArray        # c_a's floor less (W−1)·per_peer
    per_peer: FloatArray       # C·t'_d
    non_aggregator: FloatArray  # c_n = (K·C·t'_u) ∥ (K·C·t_d)
    fold_own_s: FloatArray  # s_c·κ_fold/vCPUs(M): folding the aggregator's own chunk
    fold_peer_s: FloatArray  # the same for a peer's copy (bfloat16: the codec's κ_fold16)

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

    def published(self, workers: ArrayLike, lockstep: bool = False) -> FloatArray:
        """P: when an aggregator's last merged chunk is up, after the iteration's exchange
        began; ``lockstep`` (BSP): every worker's uploads start together."""
        w = np.asarray(workers, dtype=np.float64)
        up, _ = self.aggregator_transfers(w)
        fold = self.fold_own_s + (w - 1.0) * self.fold_peer_s
        own_link = self.fill((w - 1.0) * self.sent_down_s, fold)
        if lockstep:
            sender = self.fill(self.aggregators * self.sent_up_s, fold) + self.sent_down_s
        else:
            peers = self.aggregators - 1.0
            sender = np.where(peers > 0,
                              self.fill(peers * self.sent_up_s, fold) + self.sent_down_s, 0.0)
        return np.asarray(np.maximum(np.maximum(up, own_link), sender), dtype=np.float64)

    def fill(self, stage_s: ArrayLike, fold_s: ArrayLike = 0.0) -> FloatArray:
        """C chunks through a stage of ``stage_s`` each, a fold of ``fold_s`` each, then an
        upload of t_u each."""
        x, f = np.asarray(stage_s, dtype=np.float64), np.asarray(fold_s, dtype=np.float64)
        slowest = np.maximum(np.maximum(x, f), self.chunk_up_s)
        return np.asarray(x + f + self.chunk_up_s + (self.chunks - 1) * slowest,
                          dtype=np.float64)

    def aggregator(self, workers: ArrayLike, lockstep: bool = False) -> FloatArray:
        """c_a for W workers (:meth:`published`, then the other merged shards' last chunk
        down); 0 for a single worker."""
        up, down = self.aggregator_transfers(workers)
        last_merged = self.published(workers, lockstep) + np.where(
            self.aggregators > 1, self.chunk_down_s, 0.0)
        value = np.maximum(both_ways(up, down, self.duplex), last_merged)
        return np.asarray(np.where(np.asarray(workers) > 1, value, 0.0), dtype=np.float64)

    def cross_cycle(self, train_n: ArrayLike) -> FloatArray:
        """HAP's bound through both roles, (T_n + K·C·t'_u + t'_d + t_u + t_d)/2.

        A non-aggregator's uploads of iteration l end T_n + K·C·t'_u after its iteration l
        began; its last copy comes down to an aggregator (t'_d), whose last merged chunk of
        l goes up (t_u); the non-aggregator loads it in iteration l+1 (t_d). Two of its
        iterations span that chain."""
        chain = np.asarray(train_n, dtype=np.float64) + self.uploads_n + self.sent_down_s
        return np.asarray((chain + self.chunk_up_s + self.chunk_down_s) / 2.0,
                          dtype=np.float64)


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
    _, fold_own, fold_peer = codec_cpu_per_mb(platform, upload_share)
    vcpus = lambda_vcpus(memory_mb)
    partial = PipelinedTerms(
        chunks=chunks, aggregators=k, duplex=duplex, chunk_up_s=up, chunk_down_s=down,
        sent_up_s=sent_up, sent_down_s=sent_down, uploads_n=uploads, downloads_n=downloads,
        floor_a=np.zeros_like(up), fixed_a=np.zeros_like(up),
        per_peer=np.asarray(per_shard * sent_down, dtype=np.float64),
        non_aggregator=both_ways(uploads, downloads, duplex),
        fold_own_s=np.asarray(chunk_mb * fold_own / vcpus, dtype=np.float64),
        fold_peer_s=np.asarray(chunk_mb * fold_peer / vcpus, dtype=np.float64))
    floor_a, fixed_a = _aggregator_floors(partial)
    return replace(partial, floor_a=floor_a, fixed_a=fixed_a)


def _aggregator_floors(t: PipelinedTerms) -> tuple[FloatArray, FloatArray]:
    """floor_a and fixed_a (module docstring): c_a's bounds that hold at every W >= 2 (the
    fold, which grows with W, left out)."""
    peers = t.aggregators - 1.0
    several = peers > 0
    merged_down = np.where(several, t.chunk_down_s, 0.0)
    own_uploads, _ = t.aggregator_transfers(2)  # U_a: the same at every W >= 2
    from_peers = np.where(several, t.fill(peers * t.sent_up_s) + t.sent_down_s, 0.0)
    floor_a = np.maximum(own_uploads, from_peers) + merged_down
    fixed_a = np.maximum(peers * t.chunks * t.chunk_down_s, t.chunk_up_s + merged_down)
    return np.asarray(floor_a, dtype=np.float64), np.asarray(fixed_a, dtype=np.float64)


def both_ways(up: ArrayLike, down: ArrayLike, duplex: ArrayLike) -> FloatArray:
    """U ∥ D: seconds of ``up`` of uploads beside ``down`` of downloads, max(U, D,
    (1 − d/2)·(U + D)); the local emulator shapes the same (local/lambda_/shaping.py)."""
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
