"""Memory of each worker role: the thesis's M_B = k·B + c plus the exchange buffers.

The thesis (Eq. 4-1/4-2) sizes a function by its batch alone: M_B = k·B + c, with
c = 300 MB + 3·S_m for the runtime, weights, gradients and momentum. The runtime also holds
shard frames and, on an aggregator, a float64 accumulator of its shard: up to ~1.1 GB for a
K = 1 aggregator on ResNet-50 before they were capped.
:func:`fasdl.exchange.inflight.exchange_memory_mb`
gives that term per role from the cap the runtime enforces, so a configuration is feasible
when both roles fit:

    aggregator      k·B^a + c + X_a(S_m, M, W, K)  <=  M
    non-aggregator  k·B^n + c + X_n(S_m, M, W, K)  <=  M    (only when K < W)

``Problem.exchange_memory=False`` drops X (the paper's model as printed).

A segment's end needs no term of its own: the worker gives back its shard accumulator and
gradients, then writes its checkpoint objects (each at most ~S_m) one at a time, and worker
0 evaluates at most at its training batch without gradients (fasdl.run.segment_runner), all
under the training peak (measured: docs/results.md, "Measurements behind design choices").
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fasdl.exchange.inflight import exchange_memory_mb
from planner.model.inputs.profiles import WorkloadProfile

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def exchange_terms(workload: WorkloadProfile, memory_mb: ArrayLike, workers: ArrayLike,
                   aggregators: ArrayLike, channel: str = "s3", enabled: bool = True,
                   exchange_dtype: str = "float32") -> tuple[FloatArray, FloatArray]:
    """(X_a, X_n) in MB: the exchange buffers of an aggregator and of a non-aggregator."""
    if not enabled:
        zero = np.zeros(np.broadcast(np.asarray(memory_mb), np.asarray(workers),
                                     np.asarray(aggregators)).shape)
        return zero, zero
    return exchange_memory_mb(workload.model_mb, memory_mb, workers, aggregators, channel,
                              exchange_dtype=exchange_dtype)


def role_memory_mb(workload: WorkloadProfile, memory_mb: ArrayLike, workers: ArrayLike,
                   aggregators: ArrayLike, batch_aggregator: ArrayLike,
                   batch_non_aggregator: ArrayLike, channel: str = "s3", enabled: bool = True,
                   exchange_dtype: str = "float32") -> tuple[FloatArray, FloatArray]:
    """Modelled peak memory (MB) of an aggregator and of a non-aggregator."""
    extra_a, extra_n = exchange_terms(workload, memory_mb, workers, aggregators, channel,
                                      enabled, exchange_dtype)
    return (workload.min_memory(batch_aggregator) + extra_a,
            workload.min_memory(batch_non_aggregator) + extra_n)


def role_max_batch(workload: WorkloadProfile, memory_mb: ArrayLike, workers: ArrayLike,
                   aggregators: ArrayLike, channel: str = "s3", enabled: bool = True,
                   exchange_dtype: str = "float32") -> tuple[IntArray, IntArray]:
    """Largest batch of each role, floor((M − c − X)/k); <= 0 means nothing fits."""
    extra_a, extra_n = exchange_terms(workload, memory_mb, workers, aggregators, channel,
                                      enabled, exchange_dtype)
    memory = np.asarray(memory_mb, dtype=np.float64)
    return (workload.max_batch(memory - extra_a), workload.max_batch(memory - extra_n))


def memory_exceeded(workload: WorkloadProfile, memory_mb: IntArray, workers: IntArray,
                    aggregators: IntArray, batch_aggregator: IntArray,
                    batch_non_aggregator: IntArray, channel: str = "s3", enabled: bool = True,
                    exchange_dtype: str = "float32") -> NDArray[np.bool_]:
    """Where a role's batch does not fit its memory (the MEMORY violation)."""
    max_a, max_n = role_max_batch(workload, memory_mb, workers, aggregators, channel,
                                  enabled, exchange_dtype)
    non_aggregators = aggregators < workers
    return np.asarray((batch_aggregator > max_a)
                      | (non_aggregators & (batch_non_aggregator > max_n)), dtype=bool)
