"""K-REDUCE in-process: every worker in its own thread over one memory channel."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fasdl.contract.keys import (
    KeyFormatError,
    checkpoint_object_key,
    claim_key,
    fence_key,
    manifest_key,
    merged_key,
    shard_key,
)
from fasdl.datasets import build_digits
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.kreduce import KReduceWorker, StepStats
from fasdl.exchange.shard_layout import shard_bounds
from fasdl.training.augment import to_tensors
from fasdl.training.data import (
    BatchStream,
    LocalFiles,
    Partition,
    load_partition,
    partition_bounds,
)
from fasdl.training.networks import build_model
from tests.runtime.kreduce_helpers import (
    CLASSES,
    INPUT_SHAPE,
    drive,
    make_plan,
    make_workers,
    random_batches,
    run_parallel,
)


@pytest.fixture(autouse=True)
def _single_thread_torch() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # W worker threads already share the cores
    yield
    torch.set_num_threads(threads)


def test_shard_bounds_are_contiguous_and_balanced() -> None:
    for total, shards in [(10, 3), (7, 7), (1000, 4), (5, 1)]:
        bounds = shard_bounds(total, shards)
        assert bounds[0][0] == 0 and bounds[-1][1] == total
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
        sizes = [end - start for start, end in bounds]
        assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError):
        shard_bounds(2, 3)


@pytest.mark.parametrize("aggregators", [1, 2, 4])
def test_bsp_equals_one_process_sgd_with_momentum_on_the_union_batch(aggregators: int) -> None:
    # Unequal batches (3 vs 5) when non-aggregators exist, so the batch weighting matters.
    batch_n = 4 if aggregators == 4 else 5
    batch_a = 4 if aggregators == 4 else 3
    plan = make_plan(4, aggregators, batch_a, batch_n, "bsp")
    torch.manual_seed(0)
    model = build_model("mlp", CLASSES, INPUT_SHAPE)
    reference = copy.deepcopy(model)
    iterations = 4
    batches = random_batches(plan, iterations)
    workers = make_workers(plan, model, MemoryChannel())
    drive(workers, batches, range(iterations))

    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for iteration in range(iterations):
        x = torch.cat([batches[w][iteration][0] for w in range(4)])
        y = torch.cat([batches[w][iteration][1] for w in range(4)])
        optimizer.zero_grad()
        nn.CrossEntropyLoss()(reference(x), y).backward()
        optimizer.step()
    expected = nn.utils.parameters_to_vector(reference.parameters()).detach().numpy()
    for worker in workers[1:]:  # everybody loads the same merged shards: bitwise equal
        assert np.array_equal(worker.parameters, workers[0].parameters)
    np.testing.assert_allclose(workers[0].parameters, expected, rtol=1e-5, atol=1e-6)


def _two_worker_hap_trace(hap_merge: str) -> dict[tuple[int, int], np.ndarray]:
    """The parameters each worker holds after each of 3 iterations: W=2, K=1, B^a=2, B^n=3
    on y = x·θ with MSE and SGD momentum 0.5."""
    plan = make_plan(2, 1, 2, 3, "hap", learning_rate=0.05, momentum=0.5, hap_merge=hap_merge)
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.5, -1.0]]))
    batches = [[(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32))
                for x, y in worker] for worker in HAP_TRACE_DATA]
    seen: dict[tuple[int, int], np.ndarray] = {}
    workers = make_workers(plan, model, MemoryChannel(), loss_fn=nn.MSELoss())
    drive(workers, batches, range(3),
          lambda worker, it: seen.__setitem__((worker.worker_id, it), worker.parameters.copy()))
    return seen


_trace_rng = np.random.default_rng(3)
HAP_TRACE_DATA = [[(_trace_rng.normal(size=(batch, 2)), _trace_rng.normal(size=(batch, 1)))
                   for _ in range(3)] for batch in (2, 3)]


@pytest.mark.parametrize("hap_merge", ["reapply", "paper"])
def test_hap_non_aggregator_starts_from_merged_of_the_iteration_before(hap_merge: str) -> None:
    # The hand trace in float64 numpy: `reapply` adds its own step of l to merged(l−1), the
    # paper's HAP (FasDL §IV-B) trains on from merged(l−1) as it is.
    seen = _two_worker_hap_trace(hap_merge)

    def gradient(theta: np.ndarray, worker: int, it: int) -> np.ndarray:
        x, y = HAP_TRACE_DATA[worker][it]
        result: np.ndarray = 2.0 / len(y) * x.T @ (x @ theta - y)
        return result

    weights = np.array([2.0, 3.0]) / 5.0
    theta = np.array([[0.5], [-1.0]])
    start = [theta, theta]  # what each worker trains from at the current iteration
    buffers = [np.zeros_like(theta), np.zeros_like(theta)]
    merged: list[np.ndarray] = []
    for it in range(3):
        local = []
        for w in range(2):
            buffers[w] = 0.5 * buffers[w] + gradient(start[w], w, it)
            local.append(start[w] - 0.05 * buffers[w])
        merged.append(weights[0] * local[0] + weights[1] * local[1])
        # aggregator continues from merged(l); the non-aggregator from merged(l−1) (plus its
        # own step of l again, −lr·buffer, under reapply), or at l = 0 its own update, which
        # it only uploads
        own_step = local[1] - start[1] if hap_merge == "reapply" else 0.0
        start = [merged[it], merged[it - 1] + own_step if it > 0 else local[1]]
        np.testing.assert_allclose(seen[(0, it)], start[0].ravel(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(seen[(1, it)], start[1].ravel(), rtol=1e-5, atol=1e-6)
    if hap_merge == "paper":  # exactly merged(1), as the aggregator held it after iteration 1
        np.testing.assert_array_equal(seen[(1, 2)], seen[(0, 1)])
    else:  # the step it carries is its own: merged(1) plus exactly −lr·(its momentum buffer)
        np.testing.assert_allclose(seen[(1, 2)], (merged[1] - 0.05 * buffers[1]).ravel(),
                                   rtol=1e-5)
        assert not np.allclose(seen[(1, 2)], merged[1].ravel(), rtol=1e-3)


def test_the_two_merges_first_differ_by_the_non_aggregators_own_step() -> None:
    # Up to iteration 1 both runs take the same steps; there the non-aggregator loads merged(0)
    # and only `reapply` adds −lr·(μ·g_0 + g_1), its own step of 1, on top
    reapply, paper = _two_worker_hap_trace("reapply"), _two_worker_hap_trace("paper")
    for key in [(0, 0), (1, 0), (0, 1)]:
        np.testing.assert_array_equal(reapply[key], paper[key])
    theta = np.array([[0.5], [-1.0]])
    x0, y0 = HAP_TRACE_DATA[1][0]
    g0 = 2.0 / 3 * x0.T @ (x0 @ theta - y0)
    after0 = theta - 0.05 * g0  # its own update at l = 0
    x1, y1 = HAP_TRACE_DATA[1][1]
    buffer = 0.5 * g0 + 2.0 / 3 * x1.T @ (x1 @ after0 - y1)
    np.testing.assert_allclose(reapply[(1, 1)] - paper[(1, 1)], (-0.05 * buffer).ravel(),
                               rtol=1e-4, atol=1e-7)
    assert not np.allclose(reapply[(1, 2)], paper[(1, 2)], rtol=1e-3)


class PeakTrackingChannel(MemoryChannel):
    """Records the largest number of stored keys ever seen."""

    def __init__(self) -> None:
        super().__init__()
        self.peak_keys = 0

    def put(self, key: str, data: bytes) -> None:
        super().put(key, data)
        with self._lock:
            self.peak_keys = max(self.peak_keys, len(self._store))


@pytest.mark.parametrize("sync", ["bsp", "hap"])
def test_released_step_buffers_are_made_again_with_the_same_results(sync: str) -> None:
    """A segment's end gives back the accumulator and the gradients before writing its
    checkpoint; steps after that (a warm sandbox's next segment) give the same weights."""
    plan = make_plan(3, 1, 4, 4, sync)
    torch.manual_seed(0)
    model = build_model("mlp", CLASSES, INPUT_SHAPE)
    batches = random_batches(plan, 4)
    kept, released = (make_workers(plan, model, MemoryChannel()) for _ in range(2))
    drive(kept, batches, range(4))

    def release_after_one(worker: KReduceWorker, iteration: int) -> None:
        if iteration == 1:
            worker.release_step_buffers()
            assert worker._accumulator.size == 0
            assert all(p.grad is None for p in worker.flat.params)

    drive(released, batches, range(4), after_step=release_after_one)
    for a, b in zip(kept, released, strict=True):
        assert np.array_equal(a.parameters, b.parameters)
        assert all(np.array_equal(a.optimizer_state[n], b.optimizer_state[n])
                   for n in a.optimizer_state)


@pytest.mark.parametrize(("aggregators", "sync"), [(2, "hap"), (1, "bsp"), (4, "bsp")])
def test_store_holds_at_most_two_iterations(aggregators: int, sync: str) -> None:
    workers_count = 4
    batch = 3 if aggregators < workers_count else 4
    plan = make_plan(workers_count, aggregators, batch, 4, sync)
    channel = PeakTrackingChannel()
    model = build_model("mlp", CLASSES, INPUT_SHAPE)
    iterations = 10
    drive(make_workers(plan, model, channel), random_batches(plan, iterations),
          range(iterations))
    # per iteration: W·K − K uploaded shards (aggregators keep their own) and K merged shards
    per_iteration = workers_count * aggregators
    assert channel.peak_keys <= 2 * per_iteration
    left = channel.keys()
    assert all("/merged/" in key for key in left)  # every uploaded shard was consumed
    assert {key.split("/it/")[1][:8] for key in left} <= {f"{iterations - 2:08d}",
                                                           f"{iterations - 1:08d}"}


def test_single_worker_steps_without_touching_the_store() -> None:
    plan = make_plan(1, 1, 4, 4, "bsp")
    channel = MemoryChannel()
    worker = make_workers(plan, build_model("mlp", CLASSES, INPUT_SHAPE), channel)[0]
    stats = worker.step(torch.randn(4, *INPUT_SHAPE), torch.randint(0, CLASSES, (4,)), 0)
    assert isinstance(stats, StepStats)
    assert stats.bytes_up == stats.bytes_down == 0 and channel.keys() == []
    assert stats.compute_s > 0 and stats.total_s >= stats.compute_s


def test_step_stats_split_waiting_from_transfer() -> None:
    plan = make_plan(2, 1, 3, 5, "hap")
    workers = make_workers(plan, build_model("mlp", CLASSES, INPUT_SHAPE), MemoryChannel(),
                           max_in_flight=1)  # the sequential fetch path
    stats: dict[int, list[StepStats]] = {0: [], 1: []}
    batches = random_batches(plan, 3)

    def loop(worker: KReduceWorker) -> Callable[[], None]:
        def run() -> None:
            for it in range(3):
                stats[worker.worker_id].append(worker.step(*batches[worker.worker_id][it], it))
        return run

    run_parallel([loop(w) for w in workers])
    for item in stats[0] + stats[1]:
        assert min(item.compute_s, item.upload_s, item.aggregate_s, item.download_s,
                   item.idle_s) >= 0
    # K=1: the aggregator keeps its only shard and downloads the non-aggregator's; the
    # non-aggregator uploads its shard and (from l = 1) downloads merged l−1
    assert all(s.bytes_up == 0 and s.bytes_down > 0 for s in stats[0])
    assert all(s.bytes_up > 0 for s in stats[1])
    assert stats[1][0].bytes_down == 0 and stats[1][2].bytes_down > 0


def test_hap_kreduce_learns_the_shipped_digits_dataset(tmp_path: Path) -> None:
    build_digits(tmp_path, seed=0)
    train = load_partition(LocalFiles(tmp_path), "train", 0, 1438)
    plan = make_plan(4, 2, 16, 24, "hap", learning_rate=0.1, samples=len(train))
    sizes = plan.partition_sizes()
    streams = []
    for worker in range(4):
        start, end = partition_bounds(sizes, worker)
        streams.append(BatchStream.for_plan(
            plan, worker, Partition(train.x[start:end], train.y[start:end])))
    torch.manual_seed(0)
    workers = make_workers(plan, build_model("mlp", 10, (1, 8, 8)), MemoryChannel())
    iterations = 5 * plan.iterations_per_epoch

    def loop(worker: KReduceWorker) -> Callable[[], None]:
        def run() -> None:
            for iteration in range(iterations):
                x, y = to_tensors(*streams[worker.worker_id].next_batch())
                worker.step(x, y, iteration)
        return run

    run_parallel([loop(worker) for worker in workers])
    test = load_partition(LocalFiles(tmp_path), "test", 0, 359)
    x, y = to_tensors(test.x, test.y)
    with torch.no_grad():
        accuracy = float((workers[0].model(x).argmax(1) == y).float().mean())
    # 0.939 here (HAP runs are deterministic: fixed staleness); 0.87 when the
    # non-aggregators trained from merged l−1 without re-applying their step (the paper's)
    assert accuracy > 0.91


def test_keys_follow_the_architecture_layout() -> None:
    assert shard_key("run-1", 0, 12, 3, 7) == "run-1/0/it/00000012/shard/003/from/0007"
    assert merged_key("run-1", 2, 12, 3) == "run-1/2/it/00000012/merged/003"
    assert shard_key("run-1", 0, 12, 3, 7, 5) == (
        "run-1/0/it/00000012/shard/003/from/0007/chunk/0005")
    assert merged_key("run-1", 2, 12, 3, 0) == "run-1/2/it/00000012/merged/003/chunk/0000"
    assert manifest_key("run-1", 40, 5) == "run-1/checkpoint/it/00000040/epoch/5/manifest.json"
    assert checkpoint_object_key("run-1", 40, 1, "worker/0001/momentum") == (
        "run-1/checkpoint/it/00000040/epoch/1/objects/worker/0001/momentum")
    assert claim_key("run-1", 3, 7) == "run-1/3/claim/0007"
    assert fence_key("run-1") == "run-1/fence.json"
    bad_calls: list[tuple[Callable[..., str], tuple[object, ...]]] = [
        (shard_key, ("run/1", 0, 0, 0, 0)), (merged_key, ("r", -1, 0, 0)),
        (shard_key, ("r", 0, 0, 1000, 0)), (shard_key, ("r", 0, 0, 0, 0, 10000)),
        (checkpoint_object_key, ("r", 0, 0, "../x")),
        (fence_key, ("r\n",)), (checkpoint_object_key, ("r", 0, 0, "x\n"))]
    for function, arguments in bad_calls:
        with pytest.raises(KeyFormatError):
            function(*arguments)
