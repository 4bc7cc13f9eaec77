"""fasdl.exchange.pipeline: the pipelined exchange gives the phased exchange's weights, bit for bit,
overlaps its transfers, keeps the store bounded and refuses what it cannot do."""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Iterable

import numpy as np
import pytest
from torch import nn

from fasdl.contract.plan import PlanError
from fasdl.exchange import pipeline
from fasdl.exchange.channel.base import Channel
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.inflight import frame_size
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.exchange.shard_layout import chunk_bounds
from fasdl.training.networks import build_model
from tests.runtime.kreduce_helpers import (
    CLASSES,
    INPUT_SHAPE,
    drive,
    make_plan,
    make_workers,
    random_batches,
)

ITERATIONS = 5


def _trajectory(workers: list[KReduceWorker], iterations: int,
                batches: object) -> dict[tuple[int, int], np.ndarray]:
    seen: dict[tuple[int, int], np.ndarray] = {}
    drive(workers, batches, range(iterations),  # type: ignore[arg-type]
          lambda worker, it: seen.__setitem__((worker.worker_id, it), worker.parameters.copy()))
    return seen


@pytest.mark.parametrize(("workers", "aggregators", "sync", "chunks"), [
    (4, 1, "bsp", 2), (4, 2, "hap", 3), (4, 4, "bsp", 2), (3, 2, "hap", 5), (5, 2, "bsp", 4),
    (2, 1, "hap", 7)])
def test_every_worker_holds_the_phased_exchanges_weights_bitwise(
        workers: int, aggregators: int, sync: str, chunks: int) -> None:
    batch_a, batch_n = (4, 4) if aggregators == workers else (3, 5)  # unequal: weights matter
    phased_plan = make_plan(workers, aggregators, batch_a, batch_n, sync)
    pipelined_plan = make_plan(workers, aggregators, batch_a, batch_n, sync,
                               exchange_chunks=chunks)
    model = build_model("mlp", CLASSES, INPUT_SHAPE)
    batches = random_batches(phased_plan, ITERATIONS)
    expected = _trajectory(make_workers(phased_plan, model, MemoryChannel()), ITERATIONS,
                           batches)
    pipelined = make_workers(pipelined_plan, model, MemoryChannel())
    assert all(worker.pipeline is not None for worker in pipelined)
    got = _trajectory(pipelined, ITERATIONS, batches)
    assert got.keys() == expected.keys()
    for key, values in expected.items():
        assert np.array_equal(got[key], values), f"worker {key[0]} after iteration {key[1]}"


class RecordingChannel(MemoryChannel):
    """Records every transfer's (kind, key, start, end) and the most keys ever stored; each
    transfer takes ``delay_s`` so that overlapping ones show."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.events: list[tuple[str, str, float, float]] = []
        self.peak_keys = 0
        self._events_lock = threading.Lock()

    def _record(self, kind: str, key: str, began: float) -> None:
        with self._events_lock:
            self.events.append((kind, key, began, time.monotonic()))

    def _during(self, kind: str, key: str) -> None:
        """Called inside each recorded transfer (a get: one that found its key)."""

    def put(self, key: str, data: bytes | bytearray) -> None:
        began = time.monotonic()
        self._during("put", key)
        time.sleep(self.delay_s)
        super().put(key, bytes(data))
        with self._lock:
            self.peak_keys = max(self.peak_keys, len(self._store))
        self._record("put", key, began)

    def try_get(self, key: str) -> bytes | None:
        began = time.monotonic()
        data = super().try_get(key)
        if data is not None:
            self._during("get", key)
            time.sleep(self.delay_s)
            self._record("get", key, began)
        return data

    def delete(self, keys: Iterable[str]) -> None:
        super().delete(list(keys))


class SideBySideProbe(RecordingChannel):
    """The aggregator's first two downloads of copies of iteration 1 wait for each other inside
    their transfers (30 s at most; ``met`` False then): they meet only if the pipeline has
    them under way side by side, however late a loaded machine starts the second."""

    def __init__(self) -> None:
        super().__init__(delay_s=0.02)
        self.meeting = threading.Barrier(2, timeout=30)
        self.met: bool | None = None
        self._arrived = 0

    def _during(self, kind: str, key: str) -> None:
        if kind != "get" or "/it/00000001/shard/000/" not in key:
            return
        with self._lock:
            self._arrived += 1
            if self._arrived > 2:
                return
        try:
            self.meeting.wait()
            self.met = self.met is not False
        except threading.BrokenBarrierError:
            self.met = False


class WorkerView(Channel):
    """Worker ``worker``'s door to a shared :class:`RecordingChannel`: each call tells the
    channel, on the calling thread, whose it is."""

    def __init__(self, shared: OrderProbe, worker: int) -> None:
        self.shared, self.worker = shared, worker
        self.backoff = shared.backoff

    def put(self, key: str, data: bytes | bytearray) -> None:
        self.shared.caller.worker = self.worker
        self.shared.put(key, data)

    def put_if_absent(self, key: str, data: bytes | bytearray) -> bool:
        return self.shared.put_if_absent(key, data)

    def try_get(self, key: str) -> bytes | None:
        self.shared.caller.worker = self.worker
        return self.shared.try_get(key)

    def delete(self, keys: Iterable[str]) -> None:
        self.shared.delete(keys)

    def delete_prefix(self, prefix: str) -> int:
        return self.shared.delete_prefix(prefix)

    def list_keys(self, prefix: str) -> list[str]:
        return self.shared.list_keys(prefix)


class OrderProbe(RecordingChannel):
    """Two orders of W = 3, K = 1 HAP with C chunks made to show whatever the machine's load,
    each held at most 30 s (``met``, ``held``: False if it timed out, the test fails):

    * worker 1's upload of chunk 0 of iteration 2 waits, inside its transfer, for its own first
      download of merged chunk 0 of iteration 1, and that download for the upload: they meet
      only if the pipeline has both under way at once (a phased exchange never does);
    * the aggregator's downloads of the last chunk of iteration 1 wait for merged chunk 0 of
      iteration 1 to be out: it must not wait for them."""

    def __init__(self, chunks: int) -> None:
        super().__init__(delay_s=0.01)
        self.last_chunk = f"/chunk/{chunks - 1:04d}"
        self.caller = threading.local()
        self.meeting = threading.Barrier(2, timeout=30)
        self.met: bool | None = None
        self.published = threading.Event()
        self.held: bool | None = None

    def _during(self, kind: str, key: str) -> None:
        if self.met is not None or getattr(self.caller, "worker", None) != 1:
            return
        upload = kind == "put" and "/it/00000002/" in key and "/from/0001/" in key
        download = kind == "get" and "/it/00000001/merged/" in key
        if (upload or download) and key.endswith("/chunk/0000"):
            try:
                self.meeting.wait()
                self.met = True
            except threading.BrokenBarrierError:
                self.met = False

    def put(self, key: str, data: bytes | bytearray) -> None:
        super().put(key, data)
        if key.endswith("it/00000001/merged/000/chunk/0000"):
            self.published.set()

    def try_get(self, key: str) -> bytes | None:
        if "/it/00000001/shard/000/" in key and key.endswith(self.last_chunk):
            self.held = self.published.wait(30) and self.held is not False
        return super().try_get(key)


def test_uploads_and_downloads_overlap_and_merged_chunks_go_out_before_the_shard_is_in() -> None:
    chunks = 4
    plan = make_plan(3, 1, 3, 5, "hap", exchange_chunks=chunks)
    channel = OrderProbe(chunks)  # makes both orders below show on a loaded machine too
    model = build_model("mlp", CLASSES, INPUT_SHAPE)
    workers = [KReduceWorker(plan, w, WorkerView(channel, w), copy.deepcopy(model), "run-1", 0,
                             wait_timeout_s=60.0) for w in range(plan.deployment.workers)]
    drive(workers, random_batches(plan, 3), range(3))
    assert channel.met and channel.held, (channel.met, channel.held)
    puts = [(key, began, ended) for kind, key, began, ended in channel.events if kind == "put"]
    gets = [(key, began, ended) for kind, key, began, ended in channel.events if kind == "get"]
    # a HAP non-aggregator downloads merged l−1 while it uploads l (its shard's chunks)
    own_puts = [(b, e) for key, b, e in puts if "/it/00000002/" in key and "/from/0001/" in key]
    merged_gets = [(b, e) for key, b, e in gets if "/it/00000001/merged/" in key]
    assert len(own_puts) == chunks and len(merged_gets) == 2 * chunks  # 2 non-aggregators
    assert any(g0 < p1 and p0 < g1 for p0, p1 in own_puts for g0, g1 in merged_gets)
    # the aggregator publishes merged chunk 0 of iteration 1 before the last chunk is in
    published = min(b for key, b, _ in puts if key.endswith("it/00000001/merged/000/chunk/0000"))
    last_in = max(e for key, _, e in gets
                  if "/it/00000001/shard/000/" in key and key.endswith(f"/chunk/{chunks - 1:04d}"))
    assert published < last_in


def test_under_a_small_cap_an_aggregator_still_downloads_chunks_side_by_side() -> None:
    # A cap that fits one chunk download at a time left the link idle while each chunk was
    # folded. The phased exchange holds a whole shard's frame anyway, and the plan charges it:
    # up to that, chunk downloads overlap, and no more is ever held.
    chunks = 4
    plan = make_plan(4, 1, 3, 5, "bsp", exchange_chunks=chunks)
    model = build_model("mlp", CLASSES, INPUT_SHAPE)
    shard_values = sum(p.numel() for p in model.parameters())
    cap = frame_size(shard_values // chunks + 1) + 64  # one chunk frame and a little
    channel = SideBySideProbe()  # the overlap below shows on a loaded machine too
    workers = make_workers(plan, model, channel, inflight_bytes=cap)
    exchange = workers[0].pipeline
    assert exchange is not None
    drive(workers, random_batches(plan, 2), range(2))
    assert channel.met
    copies = sorted((began, ended) for kind, key, began, ended in channel.events
                    if kind == "get" and "/shard/000/" in key and "/it/00000001/" in key)
    assert len(copies) == 3 * chunks
    assert any(later < ended for (_, ended), (later, _) in itertools.pairwise(copies))
    assert exchange.budget.peak <= max(cap, frame_size(shard_values) * exchange.read_copies)


class SlowFirstChunkChannel(RecordingChannel):
    """Uploads of chunk 0 take ``delay_s``; every later chunk's upload finishes at once, so
    puts finish out of the order they were started in."""

    def put(self, key: str, data: bytes | bytearray) -> None:
        if "/from/" in key and key.endswith("/chunk/0000"):
            time.sleep(self.delay_s)
        super().put(key, data)


def test_the_loop_sleeps_while_an_earlier_put_runs_and_later_ones_are_done(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Reaping only the oldest put left later finished ones pending, so every wait returned at
    # once: thousands of loop turns per iteration, CPU a 0.29-vCPU Lambda does not have.
    waits = 0
    real_wait = pipeline.wait

    def counting_wait(*args: object, **kwargs: object) -> object:
        nonlocal waits
        waits += 1
        return real_wait(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "wait", counting_wait)
    plan = make_plan(3, 2, 3, 5, "bsp", exchange_chunks=4)
    channel = SlowFirstChunkChannel(delay_s=0.2)
    drive(make_workers(plan, build_model("mlp", CLASSES, INPUT_SHAPE), channel),
          random_batches(plan, 2), range(2))
    transfers = len(channel.events)
    assert transfers > 0
    assert waits <= 2 * transfers, f"{waits} waits for {transfers} transfers: the loop spins"


def test_an_aggregator_reads_every_copy_of_its_shard_before_any_merged_chunk() -> None:
    plan = make_plan(4, 2, 3, 5, "hap", exchange_chunks=3)
    workers = make_workers(plan, build_model("mlp", CLASSES, INPUT_SHAPE), MemoryChannel())
    exchange = workers[0].pipeline
    assert exchange is not None
    kinds = [kind for kind, _ in exchange.receives(iteration=5, merged=5)]
    assert kinds == ["fold"] * (3 * 3) + ["merged"] * 3  # 3 peers x 3 chunks, 1 shard x 3
    folds = [(part.chunk, part.worker) for kind, part in exchange.receives(5, 5)
             if kind == "fold"]
    assert folds == sorted(folds)  # chunk by chunk, each in worker order (the fold's order)
    non_aggregator = workers[3].pipeline
    assert non_aggregator is not None
    merged = [(part.chunk, part.shard) for _, part in non_aggregator.receives(5, 4)]
    assert merged == sorted(merged) and len(merged) == 2 * 3


def test_store_keeps_chunks_of_at_most_three_iterations_and_every_copy_is_consumed() -> None:
    workers_count, aggregators, chunks, iterations = 4, 2, 3, 8
    plan = make_plan(workers_count, aggregators, 3, 4, "hap", exchange_chunks=chunks)
    channel = RecordingChannel()
    drive(make_workers(plan, build_model("mlp", CLASSES, INPUT_SHAPE), channel),
          random_batches(plan, iterations), range(iterations))
    assert channel.peak_keys <= 3 * workers_count * aggregators * chunks
    left = channel.keys()
    assert left and all("/merged/" in key and "/chunk/" in key for key in left)
    assert {key.split("/it/")[1][:8] for key in left} <= {f"{iterations - 2:08d}",
                                                           f"{iterations - 1:08d}"}


def test_resuming_a_hap_non_aggregator_from_a_checkpoint_changes_nothing() -> None:
    plan = make_plan(3, 1, 3, 5, "hap", exchange_chunks=3)
    model = build_model("mlp", CLASSES, INPUT_SHAPE)
    batches = random_batches(plan, 6)
    expected = _trajectory(make_workers(plan, model, MemoryChannel()), 6, batches)
    channel = MemoryChannel()
    first = make_workers(plan, model, channel)
    drive(first, batches, range(3))
    merged = first[0].parameters.copy()  # the aggregator holds merged(2)
    resumed = make_workers(plan, copy.deepcopy(model), MemoryChannel())
    for worker, before in zip(resumed, first, strict=True):
        worker.restore(before.parameters.copy(), {k: v.copy() for k, v in
                                                  before.optimizer_state.items()},
                       last_iteration=2, merged=merged)
    seen: dict[tuple[int, int], np.ndarray] = {}
    drive(resumed, batches, range(3, 6),
          lambda worker, it: seen.__setitem__((worker.worker_id, it), worker.parameters.copy()))
    for (worker, it), values in seen.items():
        assert np.array_equal(values, expected[(worker, it)]), f"worker {worker} at {it}"


def test_chunk_bounds_cover_the_shard() -> None:
    assert chunk_bounds(10, 17, 3) == [(10, 13), (13, 15), (15, 17)]
    assert chunk_bounds(0, 4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_more_chunks_than_a_shard_has_parameters_is_refused_naming_the_field() -> None:
    plan = make_plan(2, 2, 4, 4, "bsp", exchange_chunks=3)
    model = nn.Linear(5, 1, bias=False)  # shards of 3 and 2 parameters
    with pytest.raises(ValueError, match=r"training.exchange_chunks: 3 chunks .* \[1, 2\]"):
        make_workers(plan, model, MemoryChannel())
    with pytest.raises(PlanError, match=r"training\.exchange_chunks"):
        make_plan(2, 1, 4, 4, "bsp", exchange_chunks=0)
