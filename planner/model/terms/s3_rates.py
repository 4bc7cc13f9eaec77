"""S3 request rates of the exchange at their peak, and the hashed key prefixes that keep every
prefix within S3's documented rates.

S3 supports at least 3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD requests per second per
partitioned prefix, scales by spreading requests over prefixes, and answers 503 Slow Down
above that until it has partitioned further ("Best practices design patterns: optimizing
Amazon S3 performance",
https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html). The
runtime spreads an exchange's keys evenly over P hashed prefixes
(``training.exchange_key_prefixes``, fasdl.contract.keys.spread_key); the planner picks the
smallest P that keeps the busiest second of each prefix within those rates.

Requests per iteration (planner/model/terms/exchange_cost.py; C chunks per shard, m = K−1 shards an
aggregator ships each way, K with the paper's traffic): K·W·C PUTs and, per aggregator, the
W−1 copies it consumed and its merged shard of two iterations before deleted, counted per key
(S3 documents the rate of DELETE, not how a multi-object delete counts: the conservative
reading), and 2K(W−1)·C GETs. 404 polls of a key not there yet are not counted: they come
from workers waiting, at most one per reader per backoff step.

The peak, phased (C = 1): requests come in bursts, each phase of the exchange with every
worker in it at once (the phase times T of planner/model/terms/exchange_time.py, as for the
cache's ECPU/s, planner/model/terms/cache_throughput.py; a role that moves nothing counts 0):

- upload      PUT  K·m/T_up^a + (W−K)·K/T_up^n
- aggregate   PUT  K·(1 + W)/T_agg   (the merged shard up, W deletes)
              GET  K·(W−1)/T_agg
- download    GET  K·m/T_down^a + (W−K)·K/T_down^n

R_put = max(upload, aggregate), R_get = max(aggregate, download): phases do not add, since
a worker is in one at a time (under HAP a non-aggregator's upload of l+1 can meet the
aggregators' phase of l; the all-workers-at-once burst of each phase covers that).
Pipelined (C > 1): every worker's two directions at once, over the transfer seconds of
planner/model/terms/pipelined.py (U_a, D_a, U_n, D_n):
R_put = K·((m + 1 + W)·C)/U_a + (W−K)·K·C/U_n, R_get = K·((W−1) + m)·C/D_a + (W−K)·K·C/D_n.

Prefixes: P = max(1, ceil(max(R_put/3,500, R_get/5,500))); a plan needing more than
``Problem.max_exchange_key_prefixes`` (at most 256, two hex digits) is infeasible
(Violation.S3_REQUEST_RATE). The plan reports P and the per-prefix peaks R_put/P
(``s3_requests_per_prefix_per_s``, at most 3,500) and R_get/P (``s3_get_per_prefix_per_s``,
at most 5,500).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from planner.model.terms.exchange_time import aggregator_terms, non_aggregator_times
from planner.model.terms.pipelined import pipelined_terms
from planner.model.terms.request_ceiling import exchange_platform

if TYPE_CHECKING:
    from planner.model.inputs.problem import Problem

FloatArray = NDArray[np.float64]
PUT_PER_PREFIX_PER_S = 3_500.0
GET_PER_PREFIX_PER_S = 5_500.0


def _rate(requests: ArrayLike, seconds: ArrayLike) -> FloatArray:
    """requests / seconds, 0 where a role issues none in that phase."""
    r, s = np.asarray(requests, dtype=np.float64), np.asarray(seconds, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.where((s > 0) & (r > 0), r / s, 0.0), dtype=np.float64)


def peak_s3_request_rates(problem: Problem, workers: ArrayLike, memory_mb: ArrayLike,
                          aggregators: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """(R_put, R_get): the exchange's busiest PUT/DELETE and GET requests per second over all
    its keys (module docstring); 0 for a single worker."""
    w, mem, k = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64)
                                      for x in (workers, memory_mb, aggregators)))
    peak = _pipelined_peak if problem.exchange_chunks > 1 else _phased_peak
    puts, gets = peak(problem, w, mem, k)
    alone = w <= 1
    return (np.asarray(np.where(alone, 0.0, puts), dtype=np.float64),
            np.asarray(np.where(alone, 0.0, gets), dtype=np.float64))


def _phased_peak(problem: Problem, w: FloatArray, mem: FloatArray, k: FloatArray
                 ) -> tuple[FloatArray, FloatArray]:
    terms = aggregator_terms(problem, mem, k)
    upload_n, download_n = non_aggregator_times(problem, mem, k)
    moved = k - 1.0 if problem.own_shard_local else k
    others = np.maximum(w - k, 0.0)
    aggregate_s = terms.aggregate(w)
    upload = k * _rate(moved, terms.upload) + others * _rate(k, upload_n)
    aggregate_put = k * _rate(1.0 + w, aggregate_s)
    aggregate_get = k * _rate(w - 1.0, aggregate_s)
    download = k * _rate(moved, terms.download) + others * _rate(k, download_n)
    return np.maximum(upload, aggregate_put), np.maximum(aggregate_get, download)


def _pipelined_peak(problem: Problem, w: FloatArray, mem: FloatArray, k: FloatArray
                    ) -> tuple[FloatArray, FloatArray]:
    chunks = problem.exchange_chunks
    terms = pipelined_terms(exchange_platform(problem), mem, problem.workload.model_mb, k, chunks,
                            problem.upload_share)
    up_a, down_a = terms.aggregator_transfers(w)
    moved = k - 1.0 if problem.own_shard_local else k
    others = np.maximum(w - k, 0.0)
    puts = k * _rate((moved + 1.0 + w) * chunks, up_a) + others * _rate(k * chunks,
                                                                         terms.uploads_n)
    gets = k * _rate((w - 1.0 + moved) * chunks, down_a) + others * _rate(k * chunks,
                                                                          terms.downloads_n)
    return puts, gets


def prefixes_needed(put_rate: ArrayLike, get_rate: ArrayLike) -> NDArray[np.int64]:
    """The fewest prefixes that keep each within S3's rates: ceil(max(R_put/3,500,
    R_get/5,500)), at least 1."""
    needed = np.ceil(np.maximum(np.asarray(put_rate, dtype=np.float64) / PUT_PER_PREFIX_PER_S,
                                np.asarray(get_rate, dtype=np.float64) / GET_PER_PREFIX_PER_S))
    return np.maximum(1, needed).astype(np.int64)


def s3_utilisation(put_rate: ArrayLike, get_rate: ArrayLike) -> FloatArray:
    """max(r_put/3,500, r_get/5,500) of one prefix: above 1 it is asked more than S3
    documents."""
    return np.asarray(np.maximum(np.asarray(put_rate) / PUT_PER_PREFIX_PER_S,
                                 np.asarray(get_rate) / GET_PER_PREFIX_PER_S),
                      dtype=np.float64)
