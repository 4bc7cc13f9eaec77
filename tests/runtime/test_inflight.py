"""The frame budget: what a worker holds at once stays under the cap, results stay bitwise."""

from __future__ import annotations

import copy
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from fasdl.contract.settings import Settings, SettingsError
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.inflight import (
    MIB,
    FrameBudget,
    Uploads,
    cap_bytes,
    default_inflight_mb,
    exchange_memory_mb,
    fetch_in_order,
)
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.training.networks import build_model
from tests.runtime.kreduce_helpers import CLASSES, INPUT_SHAPE, drive, make_plan, random_batches


def test_default_cap_formula() -> None:
    # min(max(2·S_m, 64), M/20, 256): the model, the floor, the memory share, the ceiling
    np.testing.assert_allclose(default_inflight_mb([10240, 10240, 768, 10240],
                                                   [97.49, 4.71, 4.71, 417.17]),
                               [194.98, 64.0, 38.4, 256.0])


def test_k1_resnet50_aggregator_term_is_bounded() -> None:
    """The issue's case: a K = 1 aggregator on ResNet-50 held ~9 frames + the accumulator."""
    aggregator, non_aggregator = exchange_memory_mb(97.49, 3584, 10, 1)
    cap = float(default_inflight_mb(3584, 97.49))  # M/20 = 179.2: one 97.5 MB frame at once
    assert cap < 2 * 97.49
    assert float(aggregator) == pytest.approx(cap + 2 * 97.49 + 8.0)  # frames, sum, scratch
    assert float(non_aggregator) == pytest.approx(cap)
    assert float(aggregator) < 400  # was 9 frames + the accumulator, ~1070 MB, unmodelled
    alone = exchange_memory_mb(97.49, 3584, 1, 1)
    assert float(alone[0]) == 0.0 and float(alone[1]) == 0.0


def test_the_setting_overrides_the_derived_cap() -> None:
    env = {"FASDL_CHANNEL": "s3", "FASDL_DATASETS_BUCKET": "d", "FASDL_RESULTS_BUCKET": "r",
           "FASDL_EXCHANGE_BUCKET": "x"}
    derived = cap_bytes(3584, 97.49, Settings.from_env(env).exchange_inflight_mb)
    assert derived == int(float(default_inflight_mb(3584, 97.49)) * MIB)
    tight = Settings.from_env({**env, "FASDL_EXCHANGE_INFLIGHT_MB": "32"})
    assert cap_bytes(3584, 97.49, tight.exchange_inflight_mb) == 32 * MIB
    for bad in ("-1", "inf", "lots"):
        with pytest.raises(SettingsError, match="FASDL_EXCHANGE_INFLIGHT_MB"):
            Settings.from_env({**env, "FASDL_EXCHANGE_INFLIGHT_MB": bad})


def test_a_valkey_download_counts_its_client_copies() -> None:
    s3 = exchange_memory_mb(13.37, 10240, 2, 1, "s3")
    valkey = exchange_memory_mb(13.37, 10240, 2, 1, "valkey")
    assert float(valkey[1]) > float(s3[1])  # 3 copies of one frame vs two frames
    shapes = exchange_memory_mb(13.37, np.array([1024, 2048]), np.array([4, 4]), 2)
    assert shapes[0].shape == (2,)


def test_budget_admits_one_frame_alone_and_drops_spares_for_room() -> None:
    budget = FrameBudget(100)
    assert budget.admit(60) and not budget.admit(60)
    assert budget.admit(60, force=True) and budget.held == 120
    budget.release(120)
    assert budget.admit(500)  # nothing else held: a frame larger than the cap still moves
    budget.release(500)
    spare = budget.buffer(40)
    assert spare is not None
    budget.keep(spare)
    assert budget.buffer(40) is spare  # reused, still counted once
    budget.keep(spare)
    assert budget.admit(90) and budget.held == 90  # the spare was dropped to make room


def test_fetch_in_order_holds_at_most_the_cap() -> None:
    budget = FrameBudget(300)
    held: list[int] = []
    lock = threading.Lock()
    running = [0, 0]

    def fetch(key: str) -> tuple[bytes, float]:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        return key.encode() * 100, 0.0

    keys = [f"k{i}" for i in range(12)]
    with ThreadPoolExecutor(8) as pool:
        frames = fetch_in_order(budget, pool, fetch, keys, [100 * len(k) for k in keys], 8)
        got = []
        for data, _ in frames:
            held.append(budget.held)
            got.append(data[:len(data) // 100].decode())
            del data
    assert got == keys
    assert max(held) <= 300 and running[1] <= 2
    assert budget.held == 0


def test_without_a_pool_spares_make_room_for_each_download() -> None:
    budget = FrameBudget(150)
    spare = budget.buffer(100)
    assert spare is not None
    budget.keep(spare)
    seen = []
    for data, _ in fetch_in_order(budget, None, lambda key: (b"x" * 100, 0.0), ["a", "b"],
                                  [100, 100], 1):
        seen.append(budget.held)
        del data
    assert seen == [100, 100] and budget.held == 0


def test_an_abandoned_fetch_gives_its_bytes_back() -> None:
    budget = FrameBudget(1000)
    with ThreadPoolExecutor(4) as pool:
        frames = fetch_in_order(budget, pool, lambda key: (b"x" * 10, 0.0), ["a", "b", "c"],
                                [10, 10, 10], 4)
        next(frames)
        frames.close()
    assert budget.held == 0


def test_uploads_wait_for_earlier_puts_to_stay_under_the_cap() -> None:
    budget = FrameBudget(250)
    stored: dict[str, bytes] = {}
    peaks: list[int] = []

    def put(key: str, frame: bytearray) -> None:
        time.sleep(0.005)
        stored[key] = bytes(frame)

    with ThreadPoolExecutor(8) as pool:
        for iteration in range(2):
            uploads = Uploads(budget, pool, put)
            for index in range(6):
                buffer = uploads.buffer(100)
                buffer[:] = bytes([iteration * 10 + index]) * 100
                uploads.send(f"{iteration}/{index}", buffer)
                peaks.append(budget.held)
            assert uploads.finish() == 600
    assert max(peaks) <= 250
    assert stored["1/5"] == bytes([15]) * 100


@pytest.mark.parametrize(("workers", "aggregators", "sync"), [(4, 1, "bsp"), (4, 2, "hap")])
def test_a_one_frame_cap_gives_bitwise_the_same_weights(workers: int, aggregators: int,
                                                        sync: str) -> None:
    plan = make_plan(workers, aggregators, 3, 5, sync)
    torch.manual_seed(0)
    model = build_model("mlp", CLASSES, INPUT_SHAPE)
    batches = random_batches(plan, 3)
    results = []
    for cap in (None, 1):  # the derived default (all frames at once) vs one frame at a time
        channel = MemoryChannel()
        runs = [KReduceWorker(plan, w, channel, copy.deepcopy(model), "run-1", 0,
                              wait_timeout_s=60.0, inflight_bytes=cap) for w in range(workers)]
        drive(runs, batches, range(3))
        results.append([run.parameters.copy() for run in runs])
        frame = 64 + 4 * max(end - start for start, end in runs[0].bounds)
        for run in runs:
            assert run.budget.peak <= max(run.budget.cap, frame)
            run.close()
    for default, tight in zip(*results, strict=True):
        assert np.array_equal(default, tight)
