"""Bytes of shard frames a K-REDUCE worker holds at once: capped at run time, modelled in plans.

A worker holds frames in three places: upload buffers (being sent, or kept to be reused next
iteration: a fresh frame pays its page faults again, fasdl.exchange.wire.encode_shard_into),
downloaded frames it has not yet folded, and an aggregator's merged shard. :class:`FrameBudget`
keeps their sum at most the cap C, except that one frame is always admitted when nothing else
is held (so a shard larger than C still moves, one at a time). Hence frames held
<= max(C, one frame).

The default cap (:func:`default_inflight_mb`, MB = 2^20 bytes; in bytes :func:`cap_bytes`)::

    C = min(max(2·S_m, 64 MB), M/20, 256 MB)

Two models' worth of frames lets a K = 1 aggregator fetch the next frame while it folds one and
lets a non-aggregator keep its upload buffers while it downloads; 64 MB keeps the eight
requests of ``max_in_flight`` busy for small models (latency, not bytes, bounds them); M/20
keeps the exchange to 5 % of the function; 256 MB is seconds of a function's network
throughput, so more in flight would not move bytes faster. With these, the paper's Table IV
configurations still fit their memory.
``FASDL_EXCHANGE_INFLIGHT_MB`` overrides C (the plan was checked with the default).

:func:`exchange_memory_mb` is the planner's term for these buffers per role; the planner adds
it to M_B = k·B + c (planner/model/terms/memory.py). The functions take numpy arrays (one entry per
configuration) or scalars.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fasdl.contract.plan import EXCHANGE_STATE_MODELS
from fasdl.exchange.wire import HEADER_SIZE

MIB = 1 << 20
FLOOR_MB = 64.0
MEMORY_SHARE = 1.0 / 20.0
CEILING_MB = 256.0
# An aggregator scales this many elements at a time into a float64 scratch (fasdl.exchange.kreduce,
# fasdl.exchange.pipeline), which bounds the scratch to 8 MiB.
SCALED_AT_ONCE = 1 << 20
SCRATCH_MB = SCALED_AT_ONCE * 8 / MIB


def add_weighted(total: np.ndarray, part: np.ndarray, weight: float,
                 scratch: np.ndarray) -> None:
    """total += weight·part in float64, SCALED_AT_ONCE values at a time through scratch.

    The one batch-weighted fold of K-REDUCE: phased and pipelined exchanges call it in the
    same worker order, so both produce the same bits.
    """
    for begin in range(0, len(part), SCALED_AT_ONCE):
        stop = min(begin + SCALED_AT_ONCE, len(part))
        scaled = scratch[:stop - begin]
        np.multiply(part[begin:stop], weight, out=scaled)
        total[begin:stop] += scaled
# Bytes a GET of an f-byte frame holds at its peak, per channel (measured: docs/results.md,
# "Measurements behind design choices"): boto3 reads an S3 body straight into the result;
# redis-py's pure-Python reply parser buffers the value, then copies it out (3 f). A download
# is counted at this size until folded.
READ_COPIES: dict[str, float] = {"s3": 1.0, "valkey": 3.0}
# GETs and PUTs a worker keeps in flight at once (fasdl.exchange.kreduce's default): S3's
# latency dominates small shards
MAX_IN_FLIGHT = 8
FloatArray = NDArray[np.float64]


def default_inflight_mb(memory_mb: ArrayLike, model_mb: ArrayLike) -> FloatArray:
    """The cap C = min(max(2·S_m, 64 MB), M/20, 256 MB) in MB."""
    model = np.asarray(model_mb, dtype=np.float64)
    memory = np.asarray(memory_mb, dtype=np.float64)
    share = np.minimum(memory * MEMORY_SHARE, CEILING_MB)
    return np.asarray(np.minimum(np.maximum(2.0 * model, FLOOR_MB), share), dtype=np.float64)


def cap_bytes(memory_mb: float, model_mb: float, setting_mb: float = 0.0) -> int:
    """A worker's cap C in bytes: ``setting_mb`` (``FASDL_EXCHANGE_INFLIGHT_MB``) when > 0,
    else the default :func:`default_inflight_mb` the plan's memory model assumes."""
    megabytes = setting_mb or float(default_inflight_mb(memory_mb, model_mb))
    return max(1, int(megabytes * MIB))


def downloads_at_once(memory_mb: ArrayLike, model_mb: float, frame_mb: ArrayLike,
                      channel: str) -> FloatArray:
    """Frames of ``frame_mb`` a phased aggregator fetches at once under the default cap C:
    as many as C holds at the channel's READ_COPIES each, at least one, at most MAX_IN_FLIGHT.

    At one, :func:`fetch_in_order` asks for the next frame only after the caller has folded
    the last, so the folds add to the downloads instead of overlapping them.
    """
    cap = default_inflight_mb(memory_mb, model_mb)
    held = READ_COPIES[channel] * (np.asarray(frame_mb, dtype=np.float64) + HEADER_SIZE / MIB)
    return np.asarray(np.clip(np.floor(cap / held), 1.0, MAX_IN_FLIGHT), dtype=np.float64)


def exchange_memory_mb(model_mb: ArrayLike, memory_mb: ArrayLike, workers: ArrayLike,
                       aggregators: ArrayLike, channel: str = "s3",
                       cap_mb: ArrayLike | None = None, exchange_dtype: str = "float32"
                       ) -> tuple[FloatArray, FloatArray]:
    """Bytes (MB) of exchange buffers an (aggregator, non-aggregator) holds at its peak.

    With S_s = S_m/K, a frame f = S_s + its 64-byte header, r the channel's READ_COPIES (a
    download counts r·f) and C the cap:

    - aggregator:     min(max(C, r·f), (K + (W − 1)·r)·f) + 2·S_s + min(2·S_s, 8 MB)
      (frames: K − 1 uploads, W − 1 downloads, the merged shard; the float64 accumulator of
      its shard; the float64 scratch of one chunk)
    - non-aggregator: min(max(C, r·f), K·(1 + r)·f)  (K upload buffers, K merged shards)

    bfloat16 uploads (fasdl.exchange.codec) add the last merged model and the residual,
    2·S_m, and the bits of one shard, S_s/2; an aggregator also its previous merged shard, S_s.
    A single worker exchanges nothing: both are 0.
    """
    model = np.asarray(model_mb, dtype=np.float64)
    w = np.asarray(workers, dtype=np.float64)
    k = np.asarray(aggregators, dtype=np.float64)
    cap = default_inflight_mb(memory_mb, model) if cap_mb is None else np.asarray(cap_mb)
    copies = READ_COPIES[channel]
    shard = model / k
    frame = shard + HEADER_SIZE / MIB
    held = np.maximum(cap, copies * frame)
    aggregator = (np.minimum(held, (k + (w - 1.0) * copies) * frame) + 2.0 * shard
                  + np.minimum(2.0 * shard, SCRATCH_MB))
    non_aggregator = np.minimum(held, k * (1.0 + copies) * frame)
    if exchange_dtype != "float32":
        codec = EXCHANGE_STATE_MODELS[exchange_dtype] * model + shard / 2.0
        aggregator, non_aggregator = aggregator + codec + shard, non_aggregator + codec
    alone = w <= 1
    return (np.asarray(np.where(alone, 0.0, aggregator), dtype=np.float64),
            np.asarray(np.where(alone, 0.0, non_aggregator), dtype=np.float64))


class FrameBudget:
    """Bytes of frames held by one worker, at most ``cap_bytes`` (or one frame when alone).

    Only the worker's own thread calls it: puts and gets run on a pool, but their bytes are
    taken before submitting and returned after the result was collected.
    """

    def __init__(self, cap_bytes: int) -> None:
        if cap_bytes < 1:
            raise ValueError(f"the in-flight cap must be >= 1 byte, got {cap_bytes}")
        self.cap = cap_bytes
        self.held = 0
        self.peak = 0
        self._spare: list[bytearray] = []  # upload buffers kept for reuse, counted in held

    def admit(self, size: int, *, force: bool = False) -> bool:
        """Count ``size`` more bytes if they fit, dropping spare buffers to make room."""
        while self._spare and self.held + size > self.cap:
            self.held -= len(self._spare.pop(0))
        if self.held and self.held + size > self.cap and not force:
            return False
        self.held += size
        self.peak = max(self.peak, self.held)
        return True

    def release(self, size: int) -> None:
        self.held -= size

    @property
    def free(self) -> int:
        """Bytes :meth:`admit` can still grant (spare buffers are dropped to make room)."""
        return self.cap - self.held + sum(len(spare) for spare in self._spare)

    def buffer(self, size: int, *, force: bool = False) -> bytearray | None:
        """An upload buffer of ``size`` bytes: a spare one, a new one if it fits, else None."""
        for index, spare in enumerate(self._spare):
            if len(spare) == size:
                return self._spare.pop(index)
        if not self.admit(size, force=force):
            return None
        return bytearray(size)

    def keep(self, buffer: bytearray) -> None:
        """A buffer whose put has returned: still counted, reused by :meth:`buffer`."""
        self._spare.append(buffer)


class Uploads:
    """Puts of frames, each holding its buffer (in the budget) until the put returns."""

    def __init__(self, budget: FrameBudget, pool: ThreadPoolExecutor | None,
                 put: Callable[[str, bytearray], None]) -> None:
        self.budget = budget
        self.pool = pool
        self.put = put
        self.sent = 0
        self._pending: deque[tuple[Future[None], bytearray]] = deque()

    def buffer(self, size: int) -> bytearray:
        """A buffer to frame into, waiting for earlier puts until ``size`` fits."""
        while True:
            buffer = self.budget.buffer(size, force=not self._pending)
            if buffer is not None:
                return buffer
            self._finish_oldest()

    def send(self, key: str, frame: bytearray) -> None:
        self.sent += len(frame)
        if self.pool is None:
            self._finish(frame, lambda: self.put(key, frame))
        else:
            self._pending.append((self.pool.submit(self.put, key, frame), frame))

    def finish(self) -> int:
        """Wait for every put; returns the bytes sent."""
        while self._pending:
            self._finish_oldest()
        return self.sent

    def _finish_oldest(self) -> None:
        done, frame = self._pending.popleft()
        self._finish(frame, done.result)

    def _finish(self, frame: bytearray, wait: Callable[[], None]) -> None:
        try:
            wait()
        except BaseException:
            self.budget.release(len(frame))
            raise
        self.budget.keep(frame)


def fetch_in_order(budget: FrameBudget, pool: ThreadPoolExecutor | None,
                   fetch: Callable[[str], tuple[bytes, float]], keys: Sequence[str],
                   sizes: Sequence[int], window: int) -> Generator[tuple[bytes, float]]:
    """(value, seconds blocked on a missing key) of each key, in order.

    At most ``window`` GETs run at once and their frames stay within the budget. A yielded
    frame stays counted until the caller asks for the next one: drop every reference to it
    (views included) before that, or it outlives its accounting.
    """
    if pool is None:  # one GET at a time, after spare buffers made room for it
        for key, size in zip(keys, sizes, strict=True):
            budget.admit(size, force=True)
            try:
                yield fetch(key)
            finally:
                budget.release(size)
        return
    pending: deque[tuple[Future[tuple[bytes, float]], int]] = deque()
    queued = 0
    try:
        while queued < len(keys) or pending:
            while (queued < len(keys) and len(pending) < window
                   and budget.admit(sizes[queued], force=not pending)):
                pending.append((pool.submit(fetch, keys[queued]), sizes[queued]))
                queued += 1
            future, size = pending[0]
            blocked = time.perf_counter()
            data, waited = future.result()
            idle = time.perf_counter() - blocked if waited else 0.0
            try:
                yield data, idle
            finally:
                del data
                pending.popleft()
                budget.release(size)
    finally:  # abandoned (an error, a closed generator): their bytes are no one's
        for future, size in pending:
            future.cancel()
            budget.release(size)


def pipelined_cap_bytes(cap: int, largest_shard: int, read_copies: float) -> int:
    """The pipelined exchange's cap: C, or one whole shard's download (r·f) when larger.

    The phased exchange always admits one shard frame, so it holds up to max(C, r·f), and
    the planner charges that (:func:`exchange_memory_mb`). Chunk frames under C alone left
    room for one chunk download at a time beside the uploads at M/20 for a large model: each
    chunk's fold and decode then idled the download link, and the exchange ran well behind the
    planner's pipeline (measured: docs/results.md, "Measurements behind design choices").
    Up to the phased peak, downloads overlap the fold within the memory the plan was checked
    with."""
    return max(cap, int(frame_size(largest_shard) * read_copies))


def frame_size(count: int, itemsize: int = 4) -> int:
    """Bytes of a frame of ``count`` float32 values."""
    return HEADER_SIZE + count * itemsize
