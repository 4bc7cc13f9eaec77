"""The pipelined exchange (fasdl.exchange.pipeline) over every real store: the phased exchange's
weights
bit for bit, chunk frames under their own keys, nothing left but the last merged chunks; with
float32 or bfloat16 uploads."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.training.networks import build_model
from tests.integration.conftest import Backend
from tests.runtime.kreduce_helpers import CLASSES, INPUT_SHAPE, drive, make_plan, random_batches

ITERATIONS = 4


def _final(workers: list[KReduceWorker]) -> list[np.ndarray]:
    return [worker.parameters.copy() for worker in workers]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pipelined_workers_match_the_phased_exchange_bitwise(backend: Backend, prefix: str,
                                                              dtype: str) -> None:
    """bfloat16 uploads (fasdl.exchange.codec) too: their frames carry their own dtype code
    through every store, and the fold order is the phased one."""
    phased = make_plan(3, 2, 3, 5, "hap", exchange_dtype=dtype)
    pipelined = make_plan(3, 2, 3, 5, "hap", exchange_chunks=3, exchange_dtype=dtype)
    model = build_model("mlp", CLASSES, INPUT_SHAPE)
    batches = random_batches(phased, ITERATIONS)
    shared = MemoryChannel()
    reference = [KReduceWorker(phased, w, shared, copy.deepcopy(model), "run-1", 0)
                 for w in range(3)]
    drive(reference, batches, range(ITERATIONS))
    channels = [backend.channel(prefix) for _ in range(3)]  # one connection per function
    try:
        workers = [KReduceWorker(pipelined, w, channels[w], copy.deepcopy(model), "run-1", 7,
                                 wait_timeout_s=60.0) for w in range(3)]
        drive(workers, batches, range(ITERATIONS))
        for got, expected in zip(_final(workers), _final(reference), strict=True):
            assert np.array_equal(got, expected)
        for worker in workers:
            worker.close()
        last = f"run-1/7/it/{ITERATIONS - 1:08d}/"
        assert channels[0].try_get(f"{last}merged/001/chunk/0002")  # kept for the next segment
        assert channels[0].try_get(f"{last}merged/001") is None  # chunks only
        assert channels[0].try_get(f"{last}shard/000/from/0002/chunk/0000") is None  # consumed
        old = f"run-1/7/it/{ITERATIONS - 3:08d}/merged/000/chunk/0001"
        assert channels[0].try_get(old) is None  # merged l-2, deleted
    finally:
        for channel in channels:
            channel.delete_prefix("")
            channel.close()
