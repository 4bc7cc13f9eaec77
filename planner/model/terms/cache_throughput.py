"""ElastiCache Serverless throughput of the exchange: ECPUs per iteration, mean and peak ECPU/s.

ElastiCache Serverless meters requests in ECPUs: reads and writes take 1 ECPU per KB
transferred (a GET of 3.2 KB takes 3.2 ECPUs), a simple command at least 1
(https://aws.amazon.com/elasticache/pricing/, "ElastiCache Processing Units"). A cache consumes
at most its CacheUsageLimits ECPUPerSecond maximum; above it the cache throttles, so a plan
whose peak needs more cannot run at its predicted speed. AWS's API and CloudFormation pages
(API_ECPUPerSecond.html, aws-properties-elasticache-serverlesscache-ecpupersecond.html) state
no range for it. AWS's CDK reference does: "Minimum request rate limit (1000 ECPUs per second)",
"Maximum request rate limit (15000000 ECPUs per second)" (docs.aws.amazon.com/cdk/api/v2/python/
aws_cdk.aws_elasticache_alpha/CacheUsageLimitsProperty.html, checked 2026-11-30), as do the
Pulumi/Terraform AWS provider's ("Must be between 1,000 and 15,000,000"). A deploy that AWS
refuses fails at `cdk deploy`, before any run.

With S_s = S_m/K, u the upload share (1 float32, 1/2 bfloat16), C chunks per shard and
e(x MB) = max(1, 1024·x / kb_per_ecpu) the ECPUs of one request, an iteration issues

- shards up     K·(W−1)·C of u·S_s/C   (non-aggregators K shards each, aggregators K−1)
- merged up     K·C of S_s/C
- shards down   K·(W−1)·C of u·S_s/C   (each aggregator its W−1 peers' copies)
- merged down   K·(W−1)·C of S_s/C     (non-aggregators K, aggregators K−1)

(the S3 request counts of planner/model/terms/exchange_cost.py), so ECPUs/iteration is
S_m·(3W−2)·1024 at u = 1 when every request carries at least 1 KB. Mean ECPU/s = ECPUs per
iteration / T_iteration.

Peak ECPU/s, phased (C = 1): the busiest phase, each phase's ECPUs over its duration with every
worker in it at once (the model's T terms, planner/model/terms/exchange_time.py; a term of a role
that moves nothing counts 0):

- upload     K·(K−1)·e(u·S_s)/T_up^a + (W−K)·K·e(u·S_s)/T_up^n
- aggregate  K·((W−1)·e(u·S_s) + e(S_s))/T_agg
- download   K·(K−1)·e(S_s)/T_down^a + (W−K)·K·e(S_s)/T_down^n

Pipelined (C > 1): a worker uploads while it downloads, so every worker's two directions at
once: K·(E_up^a/U_a + E_down^a/D_a) + (W−K)·(E_up^n/U_n + E_down^n/D_n) with U, D the
transfer seconds of planner/model/terms/pipelined.py and E the ECPUs of those requests.
With the paper's traffic (``own_shard_local`` False) an aggregator moves K shards, not K−1.

Per key: each merged shard (each of its C chunks) is one key, so one hash slot, and every
other worker GETs it in the download phase: the busiest key takes (W−1)·e(S_s/C) ECPUs within
a non-aggregator's download time T_down^n (``peak_ecpu_per_key``, the demand at the network's
speed). AWS's "Scaling ElastiCache" page gives about 30,000 ECPU/s per slot (90,000 with
READONLY replica reads): the platform profile's ``cache_slot_ecpu_per_s`` R_slot. So a merged
key's publish takes at least e(S_s/C)/R_slot and the download phase at least
(W−1)·e(S_s/C)/R_slot (``slot_floors``, which exchange_time.iteration_times applies), when
every worker fetches the K·C merged keys at once (the runtime keeps up to 8 GETs in flight):
fewer in flight or keys sharing a slot take longer, so the floors are lower bounds. The
cache-wide peak above still uses the unthrottled phase times (a maximum sized for them is
never too small). The local relay meters every slot at the plan's R_slot
(local/servers/slot_meter.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from planner.model.terms.exchange_cost import KB_PER_MB
from planner.model.terms.exchange_time import SlotFloors, aggregator_terms, non_aggregator_times
from planner.model.terms.pipelined import pipelined_terms
from planner.model.terms.request_ceiling import exchange_platform

if TYPE_CHECKING:
    from planner.model.inputs.problem import Problem

FloatArray = NDArray[np.float64]
# CacheUsageLimits ECPUPerSecond: 1,000-15,000,000 by AWS's CDK reference (module docstring)


def request_ecpus(problem: Problem, megabytes: ArrayLike) -> FloatArray:
    """ECPUs of one request moving ``megabytes``: 1 per KB, at least 1."""
    kb = np.asarray(megabytes, dtype=np.float64) * KB_PER_MB
    return np.asarray(np.maximum(1.0, kb / problem.prices.valkey_kb_per_ecpu), dtype=np.float64)


def _sizes(problem: Problem, aggregators: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """ECPUs of one request of a worker's shard (as it travels) and of a merged shard."""
    chunks = problem.exchange_chunks
    merged_mb = problem.workload.model_mb / (np.asarray(aggregators, dtype=np.float64) * chunks)
    return (request_ecpus(problem, merged_mb * problem.upload_share),
            request_ecpus(problem, merged_mb))


def ecpus_per_iteration(problem: Problem, workers: ArrayLike, aggregators: ArrayLike
                        ) -> FloatArray:
    """ECPUs the exchange consumes per iteration (module docstring); 0 for a single worker."""
    w = np.asarray(workers, dtype=np.float64)
    k = np.asarray(aggregators, dtype=np.float64)
    shard, merged = _sizes(problem, k)
    requests = k * problem.exchange_chunks
    total = requests * ((w - 1.0) * (2.0 * shard + merged) + merged)
    return np.asarray(np.where(w <= 1, 0.0, total), dtype=np.float64)


def _rate(ecpus: ArrayLike, seconds: ArrayLike) -> FloatArray:
    """ecpus / seconds, 0 where a role moves nothing in that phase."""
    e, s = np.asarray(ecpus, dtype=np.float64), np.asarray(seconds, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.where((s > 0) & (e > 0), e / s, 0.0), dtype=np.float64)


def peak_ecpu_per_s(problem: Problem, workers: ArrayLike, memory_mb: ArrayLike,
                    aggregators: ArrayLike) -> FloatArray:
    """The exchange's busiest ECPU/s (module docstring); 0 for a single worker. It depends on
    (W, M, K) alone, so the exact search can cut (M, W, K) triples with it."""
    w, mem, k = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64)
                                      for x in (workers, memory_mb, aggregators)))
    peak = (_pipelined_peak(problem, w, mem, k) if problem.exchange_chunks > 1
            else _phased_peak(problem, w, mem, k))
    return np.asarray(np.where(w <= 1, 0.0, peak), dtype=np.float64)


def peak_ecpu_per_key(problem: Problem, workers: ArrayLike, memory_mb: ArrayLike,
                      aggregators: ArrayLike) -> FloatArray:
    """The busiest key's ECPU/s: a merged chunk read by the W−1 other workers within a
    non-aggregator's download time (module docstring); 0 for a single worker."""
    w, mem, k = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64)
                                      for x in (workers, memory_mb, aggregators)))
    _, merged = _sizes(problem, k)
    _, download_n = non_aggregator_times(problem, mem, k)
    peak = _rate((w - 1.0) * merged, download_n)
    return np.asarray(np.where(w <= 1, 0.0, peak), dtype=np.float64)


def slot_floors(problem: Problem, workers: ArrayLike, aggregators: ArrayLike) -> SlotFloors:
    """A merged key's publish and download phase at the per-slot ceiling: e(S_s/C)/R_slot and
    (W−1)·e(S_s/C)/R_slot (module docstring); 0 for a single worker."""
    w = np.asarray(workers, dtype=np.float64)
    _, merged = _sizes(problem, aggregators)
    one = np.where(w <= 1, 0.0, merged / problem.platform.cache_slot_ecpu_per_s)
    return SlotFloors(publish=np.asarray(one, dtype=np.float64),
                      download=np.asarray((w - 1.0) * one, dtype=np.float64))


def _phased_peak(problem: Problem, w: FloatArray, mem: FloatArray, k: FloatArray
                 ) -> FloatArray:
    shard, merged = _sizes(problem, k)
    terms = aggregator_terms(problem, mem, k)
    upload_n, download_n = non_aggregator_times(problem, mem, k)
    moved = k - 1.0 if problem.own_shard_local else k  # shards an aggregator ships each way
    others = np.maximum(w - k, 0.0)
    upload = k * _rate(moved * shard, terms.upload) + others * _rate(k * shard, upload_n)
    aggregate = k * _rate((w - 1.0) * shard + merged, terms.aggregate(w))
    download = k * _rate(moved * merged, terms.download) + others * _rate(k * merged,
                                                                          download_n)
    return np.asarray(np.maximum(np.maximum(upload, aggregate), download), dtype=np.float64)


def _pipelined_peak(problem: Problem, w: FloatArray, mem: FloatArray, k: FloatArray
                    ) -> FloatArray:
    chunks = problem.exchange_chunks
    shard, merged = _sizes(problem, k)
    terms = pipelined_terms(exchange_platform(problem), mem, problem.workload.model_mb, k, chunks,
                            problem.upload_share)
    up_a, down_a = terms.aggregator_transfers(w)
    aggregator = (_rate((k - 1.0) * chunks * shard + chunks * merged, up_a)
                  + _rate((w - 1.0) * chunks * shard + (k - 1.0) * chunks * merged, down_a))
    non_aggregator = (_rate(k * chunks * shard, terms.uploads_n)
                      + _rate(k * chunks * merged, terms.downloads_n))
    return np.asarray(k * aggregator + np.maximum(w - k, 0.0) * non_aggregator,
                      dtype=np.float64)
