"""Seconds of an iteration's exchange per role, and of the iteration, HAP or BSP.

Phased (C = 1), the paper's equations with the thesis corrections
(planner/model/terms/cost_model.py's docstring lists them):

- upload        T_up = S_m / tp_up(S_s)  (an aggregator: (K−1)·S_s with own_shard_local)
- aggregation   T_agg = (W−1)·(S_s/tp_down(S_s) + s·F_p) + S_s/tp_up(S_s) + F_o + (1−s)·F_p
- download      T_down = S_m / tp_down(S_s)
- HAP           T = max(T_train^a + T_up + T_agg + T_down, T_train^n + T_up^n + T_down^n)
- BSP           T = max(T_train^a + T_up, T_train^n + T_up^n) + T_agg + max(T_down, T_down^n)

The folds F_o (its own shard) and F_p (a peer's copy) are κ_fold·S_s/vCPUs(M)
(planner/model/terms/client_cpu.py; 0 in a profile without exchange CPU): the runtime folds a
copy once it has arrived, so the last one's fold follows the downloads, and where the frame
cap holds one download at a time (s = 1, fasdl.exchange.inflight.downloads_at_once) the next
GET waits for each fold. Measured in series: docs/results.md, "A fresh cache and a hot key".

With bfloat16 uploads (``Problem.upload_share`` u = 1/2) the shards a worker uploads and an
aggregator downloads are u·S_s each (tp at that size); merged shards stay S_s.

Pipelined (C > 1): planner/model/terms/pipelined.py.

A store may floor a merged shard's publish and its downloads (``SlotFloors``: Valkey's hot key,
the seconds the key's hash slot needs for its one write and its W−1 reads,
planner/model/terms/cache_throughput.py): phased, the aggregator's publish takes at least the
first and every role's download that moves anything at least the second; pipelined, the
iteration takes at least the longer training step plus both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fasdl.exchange.inflight import downloads_at_once
from planner.model.inputs.profiles import lambda_vcpus
from planner.model.terms.client_cpu import codec_cpu_per_mb, exchange_cpu_bounds
from planner.model.terms.pipelined import pipelined_terms
from planner.model.terms.request_ceiling import exchange_platform

if TYPE_CHECKING:
    from planner.model.inputs.problem import Problem

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def shard_throughputs(problem: Problem, memory_mb: ArrayLike, shard_mb: ArrayLike
                      ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """(tp_up, tp_down) of a float32 shard (merged shards) and of a worker's shard as it
    travels, at ``upload_share`` of those bytes: the same two at float32."""
    platform = exchange_platform(problem)
    up, down = (platform.throughput(way, memory_mb, shard_mb) for way in ("up", "down"))
    if problem.upload_share == 1.0:
        return up, down, up, down
    sent = np.asarray(shard_mb) * problem.upload_share
    return (up, down, platform.throughput("up", memory_mb, sent),
            platform.throughput("down", memory_mb, sent))


@dataclass(frozen=True)
class SlotFloors:
    """The fewest seconds a merged shard's publish and its downloads take (0: no floor)."""

    publish: FloatArray | float = 0.0
    download: FloatArray | float = 0.0


@dataclass(frozen=True)
class AggregatorTerms:
    """A phased aggregator's exchange in W: T_up, T_agg = (W−1)·per_peer + publish + folds,
    T_down."""

    upload: FloatArray
    per_peer: FloatArray  # one peer's shard downloaded (and folded, when in series)
    publish: FloatArray   # the merged shard uploaded
    download: FloatArray
    folds: FloatArray     # the folds no download overlaps

    @property
    def fixed(self) -> FloatArray:
        """Everything but the W−1 peer downloads: c_a = fixed + (W−1)·per_peer."""
        return np.asarray(self.upload + self.publish + self.download + self.folds,
                          dtype=np.float64)

    def aggregate(self, workers: ArrayLike, publish_floor: FloatArray | float = 0.0
                  ) -> FloatArray:
        """T_agg at W (its publish at least ``publish_floor``); 0 for a single worker."""
        w = np.asarray(workers, dtype=np.float64)
        phase = (w - 1.0) * self.per_peer + np.maximum(self.publish, publish_floor) + self.folds
        return np.asarray(np.where(w <= 1, 0.0, phase), dtype=np.float64)


def aggregator_terms(problem: Problem, memory_mb: ArrayLike, aggregators: ArrayLike
                     ) -> AggregatorTerms:
    """The terms of a phased aggregator's exchange at M and K (any W > 1)."""
    model_mb = problem.workload.model_mb
    shard_mb = model_mb / np.asarray(aggregators, dtype=np.float64)
    sent_mb = shard_mb * problem.upload_share  # a worker's shard as it travels
    tp_up, tp_down, sent_up, sent_down = shard_throughputs(problem, memory_mb, shard_mb)
    # the shards an aggregator ships: all K (paper) or all but its own (runtime)
    moved_mb = model_mb - shard_mb if problem.own_shard_local else np.full_like(shard_mb,
                                                                                 model_mb)
    _, fold_own, fold_peer = codec_cpu_per_mb(problem.platform, problem.upload_share)
    vcpus = lambda_vcpus(memory_mb)
    own, peer = shard_mb * fold_own / vcpus, shard_mb * fold_peer / vcpus
    one_at_a_time = downloads_at_once(memory_mb, model_mb, sent_mb, problem.channel) <= 1.0
    return AggregatorTerms(upload=moved_mb * problem.upload_share / sent_up,
                           per_peer=sent_mb / sent_down + np.where(one_at_a_time, peer, 0.0),
                           publish=shard_mb / tp_up, download=moved_mb / tp_down,
                           folds=np.asarray(own + np.where(one_at_a_time, 0.0, peer),
                                            dtype=np.float64))


def communication_times(problem: Problem, workers: IntArray, memory_mb: IntArray,
                        aggregators: IntArray, publish_floor: FloatArray | float = 0.0
                        ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """An aggregator's (T_up, T_agg, T_down) per iteration, its publish at least
    ``publish_floor`` (a store's, ``SlotFloors``); all zero for a single worker."""
    terms = aggregator_terms(problem, memory_mb, aggregators)
    alone = workers <= 1
    upload = np.where(alone, 0.0, terms.upload)
    download = np.where(alone, 0.0, terms.download)
    return upload, terms.aggregate(workers, publish_floor), download


def non_aggregator_times(problem: Problem, memory_mb: ArrayLike,
                         aggregators: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """A non-aggregator's (T_up, T_down): all K shards up, all K merged shards down
    (pipelined: K·C chunks each way, overlapped; the iteration counts the longer)."""
    model_mb = problem.workload.model_mb
    if problem.exchange_chunks > 1:
        chunks = problem.exchange_chunks
        terms = pipelined_terms(exchange_platform(problem), memory_mb, model_mb, aggregators,
                                chunks, problem.upload_share)
        return terms.uploads_n, terms.downloads_n
    shard_mb = model_mb / np.asarray(aggregators, dtype=np.float64)
    _, tp_down, sent_up, _ = shard_throughputs(problem, memory_mb, shard_mb)
    return model_mb * problem.upload_share / sent_up, model_mb / tp_down


def iteration_times(problem: Problem, w: IntArray, mem: IntArray, k: IntArray,
                    train_a: FloatArray, train_n: FloatArray, bsp: NDArray[np.bool_],
                    busy: tuple[FloatArray, FloatArray], floors: SlotFloors = SlotFloors()
                    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """An aggregator's (upload, aggregate, download) seconds and the iteration's, HAP or BSP.

    Pipelined (C > 1): upload and download are its K·C and (W+K−2)·C chunk requests and
    aggregate what the pipeline adds to the longer of the two (planner/model/terms/pipelined.py).
    Either way the iteration is at least each role's CPU_train/vCPUs(M) + CPU_exchange/vCPUs(M)
    (planner/model/terms/client_cpu.py); ``busy`` holds each role's first term (>= its T_train);
    ``floors``: the store's (module docstring)."""
    upload, aggregate, download, iteration = _transfer_bound(problem, w, mem, k, train_a,
                                                             train_n, bsp, floors)
    cpu_a, cpu_n = cpu_bounds(problem, w, mem, k, busy)
    return upload, aggregate, download, np.maximum(iteration, np.maximum(cpu_a, cpu_n))


def cpu_bounds(problem: Problem, w: IntArray, mem: IntArray, k: IntArray,
               busy: tuple[FloatArray, FloatArray]) -> tuple[FloatArray, FloatArray]:
    """Each role's iteration as its CPU alone sets it, ``busy`` + CPU_exchange/vCPUs(M) (the
    exchange's term 0 unless profiled); 0 for the non-aggregator when K = W (there is none)."""
    busy_a, busy_n = busy
    cpu_a, cpu_n = exchange_cpu_bounds(problem, w, mem, k)
    return (np.asarray(busy_a + cpu_a, dtype=np.float64),
            np.asarray(np.where(k < w, busy_n + cpu_n, 0.0), dtype=np.float64))


def _transfer_bound(problem: Problem, w: IntArray, mem: IntArray, k: IntArray,
                    train_a: FloatArray, train_n: FloatArray, bsp: NDArray[np.bool_],
                    floors: SlotFloors) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """iteration_times() as the transfers alone set it."""
    others = k < w  # K = W has no non-aggregator: its terms must not bind
    if problem.exchange_chunks > 1:
        chunks = problem.exchange_chunks
        terms = pipelined_terms(exchange_platform(problem), mem, problem.workload.model_mb, k,
                                chunks, problem.upload_share)
        comm_hap, comm_bsp = terms.aggregator(w), terms.aggregator(w, lockstep=True)
        upload, download = terms.aggregator_transfers(w)
        aggregate = np.where(bsp, comm_bsp, comm_hap) - np.maximum(upload, download)
        non_aggregator = np.maximum(train_n + terms.non_aggregator, terms.cross_cycle(train_n))
        hap = np.maximum(train_a + comm_hap, np.where(others, non_aggregator, 0.0))
        loaded = np.where(others, np.maximum(terms.non_aggregator, terms.published(w, True)
                                             + terms.chunk_down_s), 0.0)
        training = np.maximum(train_a, np.where(others, train_n, 0.0))
        bsp_iteration = training + np.maximum(comm_bsp, loaded)
        return upload, aggregate, download, np.maximum(
            np.where(bsp, bsp_iteration, hap), training + floors.publish + floors.download)
    upload, aggregate, download = communication_times(problem, w, mem, k, floors.publish)
    upload_n, download_n = non_aggregator_times(problem, mem, k)
    download = np.where(download > 0, np.maximum(download, floors.download), download)
    download_n = np.maximum(download_n, floors.download)
    comm_a = upload + aggregate + download
    hap = np.maximum(train_a + comm_a, np.where(others, train_n + upload_n + download_n, 0.0))
    # BSP: the merged shards exist once every upload is in and aggregated
    uploads_in = np.maximum(train_a + upload, np.where(others, train_n + upload_n, 0.0))
    bsp_iteration = uploads_in + aggregate + np.maximum(
        download, np.where(others, download_n, 0.0))
    return upload, aggregate, download, np.where(bsp, bsp_iteration, hap)
