"""A fresh ElastiCache Serverless cache: start at once on its ramp, or wait for the stack's
pre-scaled minimum.

AWS's "Scaling ElastiCache" page: an empty cache serves about 30,000 ECPU/s and doubles about
every 2-3 minutes (the ramp, planner/model/terms/cache_ramp.py), and a minimum set for
pre-scaling (the stack sets the plan's mean ECPU/s, infra/cache_limits.py) takes effect
"within 60 minutes" (``cache_prescale_s``). A run that starts at once pays the ramp's seconds
at every worker's Lambda price; one that waits pays the cache (its minimum and storage) for the
wait, no Lambda, and adds the wait to its time. Per configuration the cheaper of the two that
meets the deadline; the ramp when neither does, so the deadline is what binds and what the
search reports. Nothing a wait adds lowers a term the search bounds with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Priced:
    """A run's seconds and its cost terms (run_cost's four, storage, the store's minimum)."""

    time_s: FloatArray
    parts: tuple[FloatArray, ...]

    @property
    def cost_usd(self) -> FloatArray:
        return np.asarray(sum(self.parts), dtype=np.float64)


def start_fresh_cache(deadline_s: float, ramping: Priced,
                      priced: Callable[[FloatArray, float], Priced], wait_s: float
                      ) -> tuple[Priced, FloatArray]:
    """The run that ramps (``ramping``) or the one ``priced`` with a wait of ``wait_s``, per
    configuration (module docstring); with the seconds waited (0 where it ramps)."""
    none = np.zeros(np.shape(ramping.time_s), dtype=np.float64)
    if wait_s <= 0:
        return ramping, none
    waiting = priced(none, wait_s)
    meets_ramp, meets_wait = (run.time_s <= deadline_s for run in (ramping, waiting))
    waits = meets_wait & (~meets_ramp | (waiting.cost_usd < ramping.cost_usd))
    chosen = Priced(np.where(waits, waiting.time_s, ramping.time_s),
                    tuple(np.where(waits, a, b) for a, b in zip(waiting.parts, ramping.parts,
                                                                strict=True)))
    return chosen, np.where(waits, wait_s, 0.0)
