"""S3 request rates of the exchange per key prefix, against S3's documented per-prefix rates.

S3 supports at least 3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD requests per second per
partitioned prefix; above that it answers 503 Slow Down until it has partitioned further
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html). S3
partitions on its own as load grows, but not at once, so a plan is held to the documented
rates over the prefixes its keys spread over: today one (the runtime writes every exchange key
of a run's epoch under one prefix, fasdl.contract.keys), ``Problem.exchange_key_prefixes``.

Per iteration (planner/model/exchange_cost.py; C chunks per shard):

- PUT class   K·W·C PUTs + K·W·C DELETEs: each aggregator deletes the W−1 copies it consumed
              and its merged shard of two iterations before, counted per key (S3 documents
              the rate of DELETE, not how a multi-object delete counts: the conservative
              reading)
- GET class   2K(W−1)·C GETs

Rates per prefix are those over the iteration's seconds, divided over the prefixes:
r_put = PUT class / (T·P), r_get = GET class / (T·P). A plan's utilisation is
max(r_put/3,500, r_get/5,500); above 1 it is infeasible (Violation.S3_REQUEST_RATE).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from planner.model.exchange_cost import s3_requests_per_iteration

FloatArray = NDArray[np.float64]
PUT_PER_PREFIX_PER_S = 3_500.0
GET_PER_PREFIX_PER_S = 5_500.0


def s3_request_rates(workers: ArrayLike, aggregators: ArrayLike, iteration_s: ArrayLike,
                     chunks: int = 1, prefixes: int = 1) -> tuple[FloatArray, FloatArray]:
    """(PUT-class, GET-class) requests per second per prefix (module docstring); 0 alone."""
    puts, gets = s3_requests_per_iteration(workers, aggregators, chunks)
    seconds = np.asarray(iteration_s, dtype=np.float64) * prefixes
    with np.errstate(divide="ignore", invalid="ignore"):
        put_rate = np.where(seconds > 0, 2.0 * puts / seconds, 0.0)  # PUTs and DELETEs
        get_rate = np.where(seconds > 0, gets / seconds, 0.0)
    return np.asarray(put_rate, dtype=np.float64), np.asarray(get_rate, dtype=np.float64)


def s3_utilisation(put_rate: ArrayLike, get_rate: ArrayLike) -> FloatArray:
    """max(r_put/3,500, r_get/5,500): above 1 a prefix is asked more than S3 documents."""
    return np.asarray(np.maximum(np.asarray(put_rate) / PUT_PER_PREFIX_PER_S,
                                 np.asarray(get_rate) / GET_PER_PREFIX_PER_S),
                      dtype=np.float64)
