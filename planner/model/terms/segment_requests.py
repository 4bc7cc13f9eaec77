"""S3 requests a run pays besides the exchange's: data loads, checkpoints and fencing.

Per segment (``segments`` of them) and worker (W), with K aggregators:

- loads            GETS_PER_LOAD·W     x.npy and y.npy ranges, merged model, optimizer state
- checkpoint       W + K + 1 PUTs      each worker's optimizer state, the K merged shards,
                                       the manifest
- fence            2·W GETs            every worker reads it at its start and before its
                                       checkpoint; the trigger reads it and writes the new
                                       epoch (1 GET + 1 PUT)
- claims           W PUTs              on the S3 channel (a conditional PUT each); on Valkey a
                                       SET NX, within the cache's ECPU rounding
- fence checks     W·T/FENCE_CHECK_S   a training worker re-reads the fence every
                   GETs                fasdl.run.fencing.DEFAULT_FENCE_CHECK_S of run time T

Retries are not charged (a fault's cost is not planned).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fasdl.contract.settings import DEFAULT_FENCE_CHECK_S
from planner.model.inputs.profiles import Prices

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

GETS_PER_LOAD = 4
FENCE_GETS_PER_WORKER = 2
TRIGGER_FENCE_GETS = TRIGGER_FENCE_PUTS = 1


def segment_request_cost(prices: Prices, claim_puts_per_worker: float, workers: IntArray,
                         aggregators: IntArray, segments: FloatArray, time_s: FloatArray
                         ) -> FloatArray:
    """USD of the S3 requests above over a run of ``segments`` segments lasting ``time_s``;
    ``claim_puts_per_worker``: the channel's (planner/model/terms/channels.py)."""
    w = np.asarray(workers, dtype=np.float64)
    claims = claim_puts_per_worker * w
    gets = (GETS_PER_LOAD * w + FENCE_GETS_PER_WORKER * w + TRIGGER_FENCE_GETS) * segments
    puts = (w + aggregators + 1 + TRIGGER_FENCE_PUTS + claims) * segments
    checks = w * np.asarray(time_s, dtype=np.float64) / DEFAULT_FENCE_CHECK_S
    return np.asarray(prices.s3_get * (gets + checks) + prices.s3_put * puts, dtype=np.float64)
