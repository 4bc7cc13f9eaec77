"""The CPU of an exchange's arithmetic, metered the way the profiler reports it.

Beside the transfers (framing, checksums, the client: the profiler's ``cpu_s``), workers spend
CPU on the values themselves, and at a fraction of a vCPU that can set the pace:

* an aggregator folds every copy of its shard into a float64 sum
(fasdl.exchange.inflight.add_weighted);
* with bfloat16 uploads (fasdl.exchange.codec) each upload is framed as the difference from
  the last merged model with error feedback, rounded, and the merged values of the same range
  are later copied into that reference as they load (``bf16_frame_cpu_s``), and each peer's
  copy is folded as its reference plus the widened difference: two folds and a widening
  (``bf16_fold_cpu_s``).

Each function returns the process CPU of one pass over ``values`` (float32). The buffers are
written once first: a worker reuses its own, and first-touch page faults would cost several
times the arithmetic itself (measured: docs/results.md, "Measurements behind design choices").
"""

from __future__ import annotations

import time

import numpy as np

from fasdl.exchange.codec import BFloat16Codec
from fasdl.exchange.inflight import SCALED_AT_ONCE, add_weighted


def _scratch(count: int) -> np.ndarray:
    scratch = np.empty(min(count, SCALED_AT_ONCE), dtype=np.float64)
    scratch.fill(1.0)
    return scratch


def fold_cpu_s(values: np.ndarray) -> float:
    """Folding ``values`` into a float64 sum, as an aggregator folds a float32 copy."""
    total = np.ones(values.size, dtype=np.float64)
    scratch = _scratch(values.size)
    cpu = time.process_time()
    add_weighted(total, values, 0.5, scratch)
    return time.process_time() - cpu


def bf16_frame_cpu_s(values: np.ndarray) -> float:
    """Framing ``values`` as a bfloat16 upload (difference, error feedback, rounding), then
    loading merged values of that range (every worker loads back each range it sends)."""
    codec = BFloat16Codec(values * np.float32(0.5), None)
    codec.frame_values(values, 0, values.size)  # writes the codec's buffers once
    cpu = time.process_time()
    codec.frame_values(values, 0, values.size)
    codec.loaded(values, 0, values.size)
    return time.process_time() - cpu


def bf16_fold_cpu_s(values: np.ndarray) -> float:
    """Folding a peer's bfloat16 copy of ``values`` into a float64 sum."""
    codec = BFloat16Codec(values * np.float32(0.5), None)
    bits = codec.frame_values(values, 0, values.size).copy()
    total = np.ones(values.size, dtype=np.float64)
    scratch = _scratch(values.size)
    codec.fold_peer(total, bits, 0.5, stale=False, start=0, scratch=scratch)
    cpu = time.process_time()
    codec.fold_peer(total, bits, 0.5, stale=False, start=0, scratch=scratch)
    return time.process_time() - cpu
