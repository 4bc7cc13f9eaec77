"""Pipelined K-REDUCE: shards in C chunks, uploads overlapping downloads, a streaming merge.

The paper's K-REDUCE (fasdl.exchange.kreduce) runs an iteration's exchange in phases: every worker
uploads its shards; each aggregator waits for all W copies of its shard, averages them and
publishes the merged shard; then everyone downloads the merged shards. Each phase waits for the
one before, and a function's upload and download never overlap although its network is full
duplex. Here (FuncPipe's pipelined scatter-reduce, applied to K-REDUCE's aggregators) every
shard travels in C chunks (``training.exchange_chunks``), each its own checked frame under its
own key (fasdl.contract.keys, fasdl.exchange.wire's ``chunk``):

* an aggregator folds chunk c of its shard as soon as all W copies of it are there, into a
  float64 accumulator of one chunk, in worker order 0..W−1 (so the merged values are bitwise
  the unchunked exchange's), and publishes merged chunk c while chunk c+1 is still arriving;
* everyone downloads merged chunks as they appear while its own uploads go on; a HAP
  non-aggregator uploads iteration l's chunks while it downloads l−1's merged chunks.

One loop on the worker's thread keeps both directions busy through the worker's pool, within
its frame budget (fasdl.exchange.inflight). What keeps it correct and free of deadlock:

1. a merged chunk overwrites parameters only after this worker framed its own upload of that
   range (which carries this iteration's local update): its download does not even start before;
2. uploads depend on no one, so they must always progress: downloads never take the room of
   the largest upload frame, and at most half the pool's threads poll for keys, the other half
   are kept for puts and deletes (the pool runs every task at once, none waits for a thread);
3. frames are consumed in one fixed order: an aggregator's copies of its shard (chunk, then
   worker), then the merged chunks (chunk, then shard). A copy waits only for an upload, and
   every worker frames those; a merged chunk waits only for its aggregator's copies.

Cleanup as in fasdl.exchange.kreduce, per chunk and in the background: once aggregator t folded
chunk c
of iteration l it deletes the copies it consumed and its merged chunk c of l−2 (every worker
loaded merged l−2 before it uploaded l).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from fasdl.contract.keys import merged_key, shard_key
from fasdl.exchange.channel.base import Channel
from fasdl.exchange.codec import ExchangeCodec
from fasdl.exchange.inflight import SCALED_AT_ONCE, FrameBudget, add_weighted, frame_size
from fasdl.exchange.wire import decode_shard, encode_shard_into

Kind = Literal["fold", "merged"]
MERGED_DTYPE = np.dtype(np.float32)  # merged chunks always travel as float32 values
Fetch = Callable[[str, float], tuple[bytes, float]]


@dataclass(frozen=True)
class Part:
    """One chunk frame of an iteration: its key, where it lives in the flat vector, and the
    identity its header must carry."""

    key: str
    shard: int
    chunk: int
    start: int
    end: int
    worker: int  # the sender (the aggregator itself for a merged chunk)
    iteration: int


@dataclass
class ExchangeTotals:
    bytes_up: int = 0
    bytes_down: int = 0
    idle_s: float = 0.0  # blocked on a key that was not there yet
    fold_s: float = 0.0


class PipelinedExchange:
    """The pipelined exchange of one K-REDUCE worker (:meth:`run` once per iteration)."""

    def __init__(self, *, channel: Channel, pool: ThreadPoolExecutor, threads: int,
                 budget: FrameBudget, parts: list[list[tuple[int, int]]], weights: np.ndarray,
                 run_id: str, epoch: int, worker_id: int,
                 read_copies: float, fetch: Fetch, wait_timeout_s: float,
                 codec: ExchangeCodec, stale: list[bool]) -> None:
        if threads < 2:
            raise ValueError("the pipelined exchange needs at least 2 requests in flight")
        self.channel, self.pool, self.budget = channel, pool, budget
        self.parts = parts  # per shard, its C chunk ranges in the flat vector
        self.weights = weights
        self.run_id, self.epoch, self.frame_run = run_id, epoch, f"{run_id}/{epoch}"
        self.worker_id = worker_id
        self.workers, self.aggregators = len(weights), len(parts)
        self.is_aggregator = worker_id < self.aggregators
        self.read_copies = read_copies
        self.fetch, self.wait_timeout_s = fetch, wait_timeout_s
        self.codec, self.stale = codec, stale  # what uploads carry; which peers lag a merge
        self.get_window = threads // 2
        self.put_window = threads - self.get_window
        self.reserve = frame_size(max(end - start for start, end in self.parts[0]))
        own = self.parts[worker_id] if self.is_aggregator else [(0, 0)]
        longest = max(end - start for start, end in own)
        self.accumulator = np.empty(longest, dtype=np.float64)
        self.scratch = np.empty(min(longest, SCALED_AT_ONCE), dtype=np.float64)

    def itemsize(self, merged: bool) -> int:
        """Bytes per value of a frame: merged chunks are float32, uploads the codec's."""
        return MERGED_DTYPE.itemsize if merged else self.codec.itemsize

    def sends(self, iteration: int) -> list[Part]:
        """This worker's chunks of ``iteration`` (an aggregator keeps its own shard)."""
        return [Part(shard_key(self.run_id, self.epoch, iteration, shard, self.worker_id, chunk),
                     shard, chunk, start, end, self.worker_id, iteration)
                for chunk in range(len(self.parts[0]))
                for shard in range(self.aggregators) if shard != self.worker_id
                for start, end in [self.parts[shard][chunk]]]

    def receives(self, iteration: int, merged: int | None) -> list[tuple[Kind, Part]]:
        """What to download, in the order it is consumed: an aggregator's copies of its shard
        from every other worker, chunk by chunk, then the merged chunks of iteration
        ``merged``, chunk by chunk. Every aggregator's merged chunks are on every worker's
        path, so its own folds go first: with merged chunk c read before copies of c+1, each
        aggregator's next fold waited on the others' last publish, one chunk deep, and the
        exchange took markedly longer (measured: docs/results.md, "Measurements behind design
        choices")."""
        chunks = range(len(self.parts[0]))
        order: list[tuple[Kind, Part]] = []
        if self.is_aggregator:
            order += [("fold", Part(shard_key(self.run_id, self.epoch, iteration,
                                              self.worker_id, peer, chunk),
                                    self.worker_id, chunk, *self.parts[self.worker_id][chunk],
                                    peer, iteration))
                      for chunk in chunks for peer in range(self.workers)
                      if peer != self.worker_id]
        if merged is not None:
            order += [("merged", Part(merged_key(self.run_id, self.epoch, merged, shard, chunk),
                                      shard, chunk, *self.parts[shard][chunk], shard, merged))
                      for chunk in chunks for shard in range(self.aggregators)
                      if shard != self.worker_id]
        return order

    def run(self, values: np.ndarray, iteration: int, merged: int | None) -> ExchangeTotals:
        """Upload ``values``' chunks of ``iteration``, aggregate (an aggregator) and load the
        merged chunks of iteration ``merged`` (None: none) into ``values``."""
        return _Iteration(self, values, iteration, merged).run()


class _Iteration:
    """The state of one iteration's exchange loop (see the module docstring)."""

    def __init__(self, exchange: PipelinedExchange, values: np.ndarray, iteration: int,
                 merged: int | None) -> None:
        self.x = exchange
        self.values = values
        self.iteration = iteration
        self.sends = deque(exchange.sends(iteration))
        self.receives = exchange.receives(iteration, merged)
        self.framed: set[tuple[int, int]] = set()
        self.puts: deque[tuple[Future[None], bytearray | None]] = deque()  # and deletes
        self.gets: deque[tuple[Future[tuple[bytes, float]], int]] = deque()
        self.started = self.consumed = 0
        self.deadline = time.monotonic() + exchange.wait_timeout_s
        self.totals = ExchangeTotals()
        self.folded_up_to = 0  # the next worker whose copy of the current chunk is folded

    def run(self) -> ExchangeTotals:
        try:
            while self.sends or self.puts or self.consumed < len(self.receives):
                self._frame_sends()
                self._start_gets()
                if not (self._consume_head() or self._reap_puts()):
                    self._wait()
        finally:
            self._abandon()
        return self.totals

    # ---- uploads -----------------------------------------------------------------------
    def _frame_sends(self) -> None:
        budget = self.x.budget
        while self.sends and len(self.puts) < self.x.put_window:
            part = self.sends[0]
            merged = part.worker == part.shard  # an aggregator's merged chunk
            buffer = budget.buffer(frame_size(part.end - part.start, self.x.itemsize(merged)),
                                   force=not self.puts)
            if buffer is None:
                return
            values = (self.values[part.start:part.end] if merged
                      else self.x.codec.frame_values(self.values, part.start, part.end))
            frame = encode_shard_into(buffer, values,
                                      run=self.x.frame_run, iteration=part.iteration,
                                      worker=part.worker, shard=part.shard, chunk=part.chunk)
            self.sends.popleft()
            self.framed.add((part.shard, part.chunk))
            self.puts.append((self.x.pool.submit(self.x.channel.put, part.key, frame), frame))
            self.totals.bytes_up += len(frame)

    def _reap_puts(self) -> bool:
        """Settle every finished put or delete, in any order. Settling only the oldest left
        later finished ones in ``puts``, so :meth:`_wait` returned at once on them: the loop
        spun, and on a small Lambda share that CPU was a large part of the exchange's
        (measured: docs/results.md, "Measurements behind design choices")."""
        pending: deque[tuple[Future[None], bytearray | None]] = deque()
        finished: list[tuple[Future[None], bytearray | None]] = []
        for entry in self.puts:  # each future asked once: one that ends meanwhile waits a turn
            (finished if entry[0].done() else pending).append(entry)
        if not finished:
            return False
        self.puts = pending
        for index, (future, buffer) in enumerate(finished):
            try:
                future.result()  # a failed put or delete fails the iteration
            except BaseException:
                if buffer is not None:
                    self.x.budget.release(len(buffer))
                self.puts.extend(finished[index + 1:])  # _abandon releases their buffers
                raise
            if buffer is not None:
                self.x.budget.keep(buffer)  # still counted, reused by a frame of its size
        return True

    # ---- downloads ---------------------------------------------------------------------
    def _start_gets(self) -> None:
        budget = self.x.budget
        while self.started < len(self.receives) and len(self.gets) < self.x.get_window:
            kind, part = self.receives[self.started]
            if kind == "merged" and (part.shard, part.chunk) not in self.framed:
                return  # rule 1: our own upload of this range goes first
            size = int(frame_size(part.end - part.start, self.x.itemsize(kind == "merged"))
                       * self.x.read_copies)
            if self.gets and budget.free - size < self.x.reserve:
                return  # rule 2: room for an upload frame stays free
            budget.admit(size, force=True)
            self.gets.append((self.x.pool.submit(self.x.fetch, part.key, self.deadline), size))
            self.started += 1

    def _consume_head(self) -> bool:
        if not self.gets or not self.gets[0][0].done():
            return False
        future, size = self.gets.popleft()
        try:
            data, _ = future.result()
            self.totals.bytes_down += len(data)
            self._consume(*self.receives[self.consumed], data)
            del data
        finally:
            self.x.budget.release(size)
        self.consumed += 1
        return True

    def _consume(self, kind: Kind, part: Part, data: bytes) -> None:
        received = decode_shard(data, run=self.x.frame_run, iteration=part.iteration,
                                shard=part.shard, worker=part.worker, chunk=part.chunk,
                                expected_count=part.end - part.start,
                                dtype=MERGED_DTYPE if kind == "merged" else self.x.codec.wire_dtype)
        if kind == "merged":
            self.values[part.start:part.end] = received
            self.x.codec.loaded(self.values, part.start, part.end)
            return
        began = time.perf_counter()
        own = self.x.worker_id
        if self.folded_up_to == 0:
            self.x.accumulator[:part.end - part.start].fill(0.0)
        if self.folded_up_to < part.worker:  # the only worker not received is this one
            self._fold(own, self.values[part.start:part.end])
        total = self.x.accumulator[:part.end - part.start]
        self.x.codec.fold_peer(total, received, self.x.weights[part.worker], start=part.start,
                               stale=self.x.stale[part.worker], scratch=self.x.scratch)
        self.folded_up_to = part.worker + 1
        last_peer = self.x.workers - 1 if own != self.x.workers - 1 else self.x.workers - 2
        if part.worker == last_peer:
            if self.folded_up_to <= own:
                self._fold(own, self.values[part.start:part.end])
            self.values[part.start:part.end] = total
            self.x.codec.merged_own(self.values, part.start, part.end)
            self._publish_and_clean(part)
            self.folded_up_to = 0
        self.totals.fold_s += time.perf_counter() - began

    def _fold(self, worker: int, part: np.ndarray) -> None:
        add_weighted(self.x.accumulator, part, self.x.weights[worker], self.x.scratch)

    def _publish_and_clean(self, part: Part) -> None:
        x, it, shard, chunk = self.x, part.iteration, part.shard, part.chunk
        self.sends.appendleft(Part(merged_key(x.run_id, x.epoch, it, shard, chunk), shard, chunk,
                                   part.start, part.end, shard, it))
        consumed = [shard_key(x.run_id, x.epoch, it, shard, peer, chunk)
                    for peer in range(x.workers) if peer != shard]
        if it >= 2:
            consumed.append(merged_key(x.run_id, x.epoch, it - 2, shard, chunk))
        self.puts.append((x.pool.submit(x.channel.delete, consumed), None))

    # ---- waiting and failing -------------------------------------------------------------
    def _wait(self) -> None:
        head = [self.gets[0][0]] if self.gets else []
        pending: list[Future[Any]] = [*(future for future, _ in self.puts), *head]
        if not pending:
            raise RuntimeError("pipelined exchange stalled: nothing in flight and nothing to "
                               "start (a bug in its schedule)")
        blocked = time.perf_counter()
        wait(pending, return_when=FIRST_COMPLETED)
        if head and head[0].done() and head[0].exception() is None and head[0].result()[1] > 0:
            self.totals.idle_s += time.perf_counter() - blocked

    def _abandon(self) -> None:
        """After an error: what is still in flight is no one's (a normal end leaves nothing)."""
        for get, size in self.gets:
            get.cancel()
            self.x.budget.release(size)
        for put, buffer in self.puts:
            put.cancel()
            if buffer is not None:
                self.x.budget.release(len(buffer))
        self.gets.clear()
        self.puts.clear()
