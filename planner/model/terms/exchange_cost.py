"""What the exchange itself costs: S3 requests, or ElastiCache Serverless ECPUs and storage.

- S3 exchange requests per iteration: R_up = K·W PUTs, R_down = 2K(W−1) GETs   (3-24..3-26),
  each times C when the exchange is pipelined in C chunks per shard
- Valkey: ECPUs for S_m·(3W−2) MB per iteration (3-27) at 1 ECPU per KB, plus data stored
  (the exchange's peak: two live iterations of shards and the epoch before's leftovers,
  fasdl.contract.cache; at least the metered minimum) in GB-hours for the run's duration.
  With bfloat16 uploads (u = 1/2 of float32's bytes) the W−1 models' worth of shards go up and
  come down at u: S_m·((W−1)(1 + 2u) + 1), which is S_m·(3W−2) at u = 1.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fasdl.contract.cache import exchange_peak_copies
from planner.model.inputs.profiles import Prices

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
MB_PER_GB = KB_PER_MB = 1024.0


def exchange_bytes_per_iteration_mb(model_mb: float, workers: ArrayLike,
                                    upload_share: float = 1.0) -> FloatArray:
    """Bytes moved through the channel per iteration: shards up and down (at ``upload_share``
    of float32's bytes), the merged model up and down: S_m·(3W − 2) at 1 (thesis 3-27)."""
    w = np.asarray(workers, dtype=np.float64)
    return np.where(w <= 1, 0.0,
                    model_mb * ((w - 1.0) * (2.0 * upload_share + 1.0) + 1.0))


def s3_requests_per_iteration(workers: ArrayLike, aggregators: ArrayLike, chunks: int = 1
                              ) -> tuple[FloatArray, FloatArray]:
    """(PUT, GET) per iteration: R_up = K·W·C, R_down = 2K(W−1)·C (thesis 3-24, 3-25; every
    shard is C requests when the exchange is pipelined)."""
    w = np.asarray(workers, dtype=np.float64)
    k = np.asarray(aggregators, dtype=np.float64)
    alone = w <= 1
    return (np.where(alone, 0.0, k * w * chunks),
            np.where(alone, 0.0, 2.0 * k * (w - 1.0) * chunks))


def s3_exchange_cost(prices: Prices, w: IntArray, k: IntArray, total_iterations: FloatArray,
                     chunks: int = 1) -> FloatArray:
    """USD of an S3 exchange over the run: its PUT and GET requests."""
    puts, gets = s3_requests_per_iteration(w, k, chunks)
    return np.asarray(total_iterations * (prices.s3_put * puts + prices.s3_get * gets),
                      dtype=np.float64)


def valkey_exchange_cost(prices: Prices, model_mb: float, w: IntArray, k: IntArray,
                         total_iterations: FloatArray, time: FloatArray, chunks: int = 1,
                         upload_share: float = 1.0) -> FloatArray:
    """USD of a Valkey exchange over the run: its ECPUs and the data it stores."""
    gb_hour, min_gb, ecpu_price = prices.require_valkey()
    traffic_mb = exchange_bytes_per_iteration_mb(model_mb, w, upload_share)
    ecpus = total_iterations * traffic_mb * KB_PER_MB / prices.valkey_kb_per_ecpu
    # The exchange's peak, leftovers of the epoch before included (fasdl.contract.cache). A
    # single worker exchanges nothing but the cache still meters its minimum.
    peak = exchange_peak_copies(w.astype(np.float64), chunks=chunks, upload_share=upload_share)
    live_gb = np.where(w <= 1, 0.0, peak * model_mb / MB_PER_GB)
    stored_gb = np.maximum(min_gb, live_gb)
    stored = stored_gb * time / 3600.0 * gb_hour
    return np.asarray(ecpus * ecpu_price + stored, dtype=np.float64)
