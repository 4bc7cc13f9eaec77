"""The compute model, written once: the seconds one training iteration takes,

    T_train(B, M) = a·(B + b)/(M + m)                               (FasDL Eq. 4, thesis 3-12)

- B: the worker's batch (samples per iteration);
- M: the function memory in MB, which buys CPU in proportion (Lambda's vCPUs are M/1769);
- a: seconds·MB per sample, the work of one sample at one MB's worth of CPU;
- b: samples' worth of fixed work per step (optimizer, framework overhead);
- m: MB that shift the CPU share M buys (M + m the effective capacity; a fitted m may be
  negative: below -M there is no compute at all).

The planner's :meth:`WorkloadProfile.train_time`, the profiler's fit (planner/fit/profiler.py)
and ``planner calibrate`` all call :func:`predict_train_time` (the exact search's bounds its
slope, :func:`seconds_per_sample`), so a fitted (a, b, m) means the
same to the fit that found it and to the search that uses it (adaptdl's goodput.py keeps one
predict function for its fit and its optimizer alike).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray


def predict_train_time(batch: ArrayLike, memory_mb: ArrayLike, *, a: float, b: float,
                       m: float) -> NDArray[np.float64]:
    """Seconds per training iteration, a·(B+b)/(M+m); inf where M + m <= 0 (no compute)."""
    batches = np.asarray(batch, dtype=float)
    capacity = np.asarray(memory_mb, dtype=float) + m
    with np.errstate(divide="ignore", invalid="ignore"):
        seconds = a * (batches + b) / capacity
    return np.asarray(np.where(capacity > 0, seconds, np.inf), dtype=np.float64)


def seconds_per_sample(memory_mb: ArrayLike, *, a: float, m: float) -> NDArray[np.float64]:
    """α = a/(M+m), the slope of T_train in B (T_train = α·(B + b)), which the exact search's
    bounds work with; unguarded: the caller masks M + m <= 0."""
    return np.asarray(a / (np.asarray(memory_mb, dtype=float) + m), dtype=np.float64)
