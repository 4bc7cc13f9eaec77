"""A run's segments in the cost model (planner/model/terms/cost_model.py's ``evaluate``): what
a segment reads when it starts and writes when it ends, the seconds of the run's cold start,
of each segment's load and checkpoint, and how many iterations fit one segment's time."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from fasdl.contract.plan import EXCHANGE_STATE_MODELS
from planner.model.inputs.problem import FloatArray, IntArray, Problem


def segment_io_mb(problem: Problem, aggregators: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """MB a segment reads when it starts (the merged model and the optimizer state, 2·S_m) and
    writes at its end (the merged model and an aggregator's optimizer shard, S_m + S_m/K). With
    bfloat16 uploads both also carry the codec's state (fasdl.exchange.codec): the last merged
    model and the residual, 2·S_m, and an aggregator's previous merged shard, S_m/K."""
    model = problem.workload.model_mb
    shard = model / np.asarray(aggregators, dtype=np.float64)
    codec = (np.zeros_like(shard) if problem.exchange_dtype == "float32"
             else EXCHANGE_STATE_MODELS[problem.exchange_dtype] * model + shard)
    return (np.asarray(2.0 * model + codec, dtype=np.float64),
            np.asarray(model + shard + codec, dtype=np.float64))


def segment_load_and_checkpoint(problem: Problem, mem: IntArray, k: IntArray, ba: IntArray,
                                 bn: IntArray, global_batch: IntArray
                                 ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Seconds of the run's cold start (the platform's, then the data partition, which stays in
    /tmp), of each segment's load (in a warm sandbox) and of its checkpoint write
    (:func:`segment_io_mb`)."""
    wl, platform = problem.workload, problem.platform
    # A fitted m < -M makes the alignment rule's B^n negative; evaluate marks those
    # configurations infeasible, so only keep their sizes valid here.
    partition_mb = np.maximum(wl.dataset_mb * np.maximum(ba, bn) / global_batch, 0.0)
    cold = platform.cold_start_s(mem) + platform.transfer_time("down", mem, partition_mb)
    load_mb, checkpoint_mb = segment_io_mb(problem, k)
    load = platform.transfer_time("down", mem, load_mb)
    checkpoint = platform.transfer_time("up", mem, checkpoint_mb)
    return cold, load, checkpoint


def segmenting(budget: FloatArray, iteration: FloatArray, total_iterations: FloatArray,
               most: int | None = None) -> tuple[IntArray, FloatArray]:
    """Iterations that fit a segment's time ``budget`` (0: none), at ``most`` (None: no
    ceiling), and the segments needed."""
    with np.errstate(divide="ignore", invalid="ignore"):
        fit = np.floor(budget / iteration)
    if most is not None:
        fit = np.minimum(fit, most)
    segment_iterations = np.where(np.isfinite(fit) & (fit > 0), fit, 0).astype(np.int64)
    with np.errstate(divide="ignore"):
        segments = np.ceil(total_iterations / np.maximum(segment_iterations, 1))
    return segment_iterations, segments
