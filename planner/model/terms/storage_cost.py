"""What a run pays to keep things: its checkpoints and results on S3 Standard, and the
ElastiCache Serverless ECPU/s minimum its cache is pre-scaled to.

Checkpoints (fasdl.run.checkpoint) hold the merged model, every worker's optimizer vectors
(fasdl.contract.plan.OPTIMIZER_STATE), a HAP non-aggregator's own parameters and, with bfloat16
uploads, the codec's state (two model-sized vectors a worker, an aggregator's previous merged
shard): in model sizes S_m,

    C = S_m·(1 + W·(v + e) + [hap]·(W − K) + [e > 0])

with v optimizer vectors and e codec vectors (EXCHANGE_STATE_MODELS). A run of S segments
writes S of them; the trigger keeps the newest N (``FASDL_KEEP_CHECKPOINTS``,
fasdl.run.retention) and deletes the rest, which the versioned results bucket keeps as
noncurrent versions until its lifecycle rule expires them (fasdl.contract.storage_lifecycle).
Priced, in GB-months of S3 Standard (prices.s3_storage_gb_month; a month of 730 hours, S3's
GB-month being byte-hours over the month's hours, https://aws.amazon.com/s3/faqs/):

- during the run: min(N, S) checkpoints for its duration T (at most that many are current);
- pruned: max(S − N, 0) checkpoints for the noncurrent period and the wait for midnight UTC;
- kept: min(N, S) checkpoints plus the final model and its export (2·S_m) for
  RESULTS_PRICED_DAYS after the run.

ElastiCache Serverless meters a configured ECPU/s minimum once it is in place, "even if your
application is not executing requests on the cache" (Pre-scaling, "Scaling ElastiCache",
https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/Scaling.html). The cache stack sets it
to the plan's mean ECPU/s m, rounded up into the range the API accepts (infra/cache_limits.py
``cache_limits``). The minimum being a rate, the planner takes each second as billed at the
larger of the consumption and m: the exchange runs at its peak rate p > m for consumed/p
seconds, already counted in the exchange line, and every other second of the run (T) pays m:

    minimum ECPUs = m·max(T − consumed/p, 0)

The time the cache stands before and after the run is not priced: destroy it between runs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fasdl.contract.cache import MAX_ECPU_PER_SECOND, MIN_ECPU_PER_SECOND
from fasdl.contract.plan import EXCHANGE_STATE_MODELS, OPTIMIZER_STATE
from fasdl.contract.settings import DEFAULT_KEEP_CHECKPOINTS
from fasdl.contract.storage_lifecycle import (
    RESULTS_NONCURRENT_DAYS,
    RESULTS_PRICED_DAYS,
    SECONDS_PER_DAY,
    billed_noncurrent_s,
)
from planner.model.inputs.problem import Problem
from planner.model.inputs.profiles import Prices

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
MB_PER_GB = 1024.0
SECONDS_PER_MONTH = 730 * 3600.0
FINAL_MODEL_COPIES = 2  # model.safetensors and the last checkpoint's export


def checkpoint_mb(problem: Problem, workers: IntArray, aggregators: IntArray,
                  bsp: NDArray[np.bool_]) -> FloatArray:
    """MB of one checkpoint (C above)."""
    w = np.asarray(workers, dtype=np.float64)
    k = np.asarray(aggregators, dtype=np.float64)
    vectors = len(OPTIMIZER_STATE[problem.workload.recipe.optimizer])
    codec = EXCHANGE_STATE_MODELS[problem.exchange_dtype]
    hap_params = np.where(np.asarray(bsp, dtype=bool), 0.0, w - k)
    copies = 1.0 + w * (vectors + codec) + hap_params + (1.0 if codec else 0.0)
    return np.asarray(problem.workload.model_mb * copies, dtype=np.float64)


def storage_cost(problem: Problem, workers: IntArray, aggregators: IntArray,
                 bsp: NDArray[np.bool_], segments: FloatArray, time_s: FloatArray,
                 keep: int = DEFAULT_KEEP_CHECKPOINTS) -> FloatArray:
    """USD of S3 Standard storage for the run's checkpoints and results (see above)."""
    size_gb = checkpoint_mb(problem, workers, aggregators, bsp) / MB_PER_GB
    segments = np.asarray(segments, dtype=np.float64)
    kept = np.minimum(float(keep), segments)
    pruned = np.maximum(segments - keep, 0.0)
    final_gb = FINAL_MODEL_COPIES * problem.workload.model_mb / MB_PER_GB
    gb_seconds = (kept * size_gb * np.asarray(time_s, dtype=np.float64)
                  + pruned * size_gb * billed_noncurrent_s(RESULTS_NONCURRENT_DAYS)
                  + (kept * size_gb + final_gb) * RESULTS_PRICED_DAYS * SECONDS_PER_DAY)
    return np.asarray(problem.prices.s3_storage_gb_month * gb_seconds / SECONDS_PER_MONTH,
                      dtype=np.float64)


def cache_minimum_ecpu_per_s(mean_ecpu_per_s: FloatArray) -> FloatArray:
    """The ECPU/s minimum the cache stack sets for a plan of this mean (infra/cache_limits.py)."""
    return np.asarray(np.clip(np.ceil(mean_ecpu_per_s), MIN_ECPU_PER_SECOND,
                              MAX_ECPU_PER_SECOND), dtype=np.float64)


def cache_minimum_cost(prices: Prices, *, mean_ecpu_per_s: FloatArray,
                       peak_ecpu_per_s: FloatArray, consumed_ecpus: FloatArray,
                       time_s: FloatArray) -> FloatArray:
    """USD the cache's ECPU/s minimum adds over a Valkey run (see above)."""
    _, _, ecpu_price = prices.require_valkey()
    with np.errstate(divide="ignore", invalid="ignore"):
        exchanging = np.where(peak_ecpu_per_s > 0, consumed_ecpus / peak_ecpu_per_s, 0.0)
    idle = np.maximum(np.asarray(time_s, dtype=np.float64) - exchanging, 0.0)
    return np.asarray(cache_minimum_ecpu_per_s(mean_ecpu_per_s) * idle * ecpu_price,
                      dtype=np.float64)
