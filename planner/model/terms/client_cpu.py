"""The client's CPU in the exchange: profiled per request and per MB, charged per iteration.

A Lambda function gets M/1769 vCPU. Framing and checksums, the client library and an
aggregator's fold all run on that share, and at 0.29 vCPU (512 MB) they can take longer than
the transfers they serve: with uploads overlapping downloads (the pipelined exchange) the
roles' CPU, not the network, set the pace in bench.prediction. Hence, per role and iteration,

    T ≥ CPU_train / vCPUs(M) + CPU_exchange / vCPUs(M),
    CPU_exchange = n_up·κ_req^up + MB_up·κ_MB^up + n_down·κ_req^down + MB_down·κ_MB^down
                   + MB_folded·κ_fold

with CPU_train = cpu_step_s + B·cpu_sample_s, the profiled CPU of a training iteration (the
workload profile's; never below T_train). The profiler times a step after a pause, as a run's
step follows its exchange's waits, so a short step runs at a core's speed on the quota the
waits left (fasdl/profiling/measure.py): its T_train is then below CPU_train/vCPUs(M), which is
what the
step costs once the exchange keeps the share busy.
The κ come from the profiler's transfer samples (``cpu_s``, ``fold_cpu_s``,
``bf16_frame_cpu_s``, ``bf16_fold_cpu_s``); a profile without them (the shipped ones:
never measured on AWS) has κ = 0 and the bound is void. The arithmetic's κ are the marginal
CPU per MB (least squares through the origin, so the largest samples set it): under a CPU cap
its cost per MB grows with size until the arrays no longer stay in cache between the cap's
stops (measured: docs/results.md, "Measurements behind design choices"), and in a run they
never do: a training step runs between two uses of the same shard.
Traffic per iteration is the runtime's (an aggregator keeps its own shard), C requests per
shard (C = 1: the phased exchange), u = the uploads' share of float32 bytes:

- non-aggregator: up K·C requests, u·S_m MB; down K·C requests, S_m MB
- aggregator: up K·C requests, u·S_m·(K−1)/K + S_m/K MB; down (W+K−2)·C requests,
  ((W−1)·u + K−1)·S_m/K MB; folded W·S_m/K MB.

bfloat16 uploads add the codec's arithmetic (fasdl.exchange.cpu_cost), per MB of float32 values:
framing every upload and loading its range back merged (κ_frame16: S_m, an aggregator
(K−1)·S_m/K) and folding each of the W−1
peers' copies at κ_fold16 instead of κ_fold (the aggregator's own shard stays κ_fold).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from planner.model.inputs.profiles import PlatformProfile, lambda_vcpus

if TYPE_CHECKING:
    from planner.model.inputs.problem import Problem

FloatArray = NDArray[np.float64]


def exchange_cpu_bounds(problem: Problem, workers: ArrayLike, memory_mb: ArrayLike,
                        aggregators: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """CPU_exchange / vCPUs(M) of an aggregator and of a non-aggregator, per iteration."""
    p = problem.platform
    w, k = (np.asarray(x, dtype=np.float64) for x in (workers, aggregators))
    c, model, u = float(problem.exchange_chunks), problem.workload.model_mb, problem.upload_share
    shard = model / k

    def cpu(up_requests: FloatArray, up_mb: FloatArray, down_requests: FloatArray,
            down_mb: FloatArray) -> FloatArray:
        return np.asarray(up_requests * p.cpu_up_request_s + up_mb * p.cpu_up_mb_s
                          + down_requests * p.cpu_down_request_s + down_mb * p.cpu_down_mb_s,
                          dtype=np.float64)

    frame, fold_own, fold_peer = codec_cpu_per_mb(p, u)
    non_aggregator = (cpu(k * c, np.full_like(k, u * model), k * c, np.full_like(k, model))
                      + model * frame)
    aggregator = (cpu(k * c, u * shard * (k - 1) + shard, (w + k - 2) * c,
                      ((w - 1) * u + k - 1) * shard)
                  + shard * ((k - 1) * frame + fold_own + (w - 1) * fold_peer))
    vcpus = lambda_vcpus(memory_mb)
    alone = w <= 1
    return (np.asarray(np.where(alone, 0.0, aggregator / vcpus), dtype=np.float64),
            np.asarray(np.where(alone, 0.0, non_aggregator / vcpus), dtype=np.float64))


def codec_cpu_per_mb(platform: PlatformProfile, upload_share: float
                     ) -> tuple[float, float, float]:
    """CPU per MB of float32 values (framing an upload, folding the aggregator's own shard,
    folding a peer's copy): bfloat16 uploads (share < 1) are framed and folded by the codec."""
    if upload_share < 1.0:
        return (platform.cpu_bf16_frame_mb_s, platform.cpu_fold_mb_s,
                platform.cpu_bf16_fold_mb_s)
    return 0.0, platform.cpu_fold_mb_s, platform.cpu_fold_mb_s
