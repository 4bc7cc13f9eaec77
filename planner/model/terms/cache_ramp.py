"""A fresh ElastiCache Serverless cache's ramp: the seconds its ECPU/s ramp adds to a run.

AWS's user guide ("Scaling ElastiCache", its pre-scaling section,
https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/Scaling.html) says an empty cache
supports about 30,000 ECPU/s (90,000 with read-from-replica) and scales up by doubling, about
every 2-3 minutes on Valkey 8 (10-12 minutes in older text), and that a minimum set for
pre-scaling takes effect within 60 minutes; it does not say whether a minimum given at
creation is in force when the cache turns available. The project destroys the cache between
runs (it bills while idle), so every run starts on a fresh cache unless told otherwise
(``planner plan --cache-warm``). Both numbers are platform-profile fields
(``cache_fresh_ecpu_per_s``, ``cache_ramp_doubling_s``, planner/model/inputs/platform_profile.py).

The model: the cache serves R_i = R_0·2^i ECPU/s during its i-th doubling interval of τ
seconds from the run's first exchange (held at the interval's start, so never optimistic
within it). An iteration's exchange moves E ECPUs (cache_throughput.ecpus_per_iteration) in
T_x seconds unthrottled; at R_i it takes max(T_x, E/R_i), the rest of the iteration
(T_it − T_x) unchanged, so the iteration slows by s_i = (T_it − T_x + max(T_x, E/R_i))/T_it.
Interval i advances the run by τ/s_i unthrottled seconds and adds τ·(1 − 1/s_i); once
R_i ≥ E/T_x, or the run's training is done, nothing more is added. This charges the exchange
its mean rate over its own window: phases that peak above it lose a little more, so the
extra seconds are a floor, as every term the search bounds with (planner/search/bounds.py).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
# 30,000·2^10 > the 15,000,000 ECPU/s a cache accepts at most (cache_throughput.py): past ten
# doublings nothing can be throttled any more
MAX_DOUBLINGS = 10


def ramp_extra_s(*, training_s: ArrayLike, iteration_s: ArrayLike, exchange_s: ArrayLike,
                 ecpus_per_iteration: ArrayLike, fresh_ecpu_per_s: float,
                 doubling_s: float) -> FloatArray:
    """Seconds a fresh cache's ramp adds to a run whose iterations take ``training_s`` in all
    unthrottled (module docstring); 0 where nothing is throttled."""
    remaining, iteration, exchange, ecpus = np.broadcast_arrays(*(
        np.asarray(value, dtype=np.float64) for value in (training_s, iteration_s, exchange_s,
                                                          ecpus_per_iteration)))
    remaining = remaining.copy()
    extra = np.zeros_like(remaining)
    for interval in range(MAX_DOUBLINGS):
        rate = fresh_ecpu_per_s * 2.0 ** interval
        with np.errstate(divide="ignore", invalid="ignore"):
            stretched = iteration - exchange + np.maximum(exchange, ecpus / rate)
            slowdown = np.where(iteration > 0, stretched / iteration, 1.0)
        advanced = np.minimum(remaining, doubling_s / slowdown)
        extra += advanced * (slowdown - 1.0)
        remaining -= advanced
    return np.asarray(extra, dtype=np.float64)


def seconds_to_reach(peak_ecpu_per_s: ArrayLike, *, fresh_ecpu_per_s: float,
                     doubling_s: float) -> FloatArray:
    """Seconds from a fresh cache's first request until it serves ``peak_ecpu_per_s``:
    whole doubling intervals, as :func:`ramp_extra_s` counts them."""
    peak = np.asarray(peak_ecpu_per_s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        doublings = np.ceil(np.log2(np.maximum(peak, 1.0) / fresh_ecpu_per_s))
    return np.asarray(np.maximum(doublings, 0.0) * doubling_s, dtype=np.float64)
