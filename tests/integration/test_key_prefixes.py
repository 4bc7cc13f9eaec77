"""Hashed exchange-key prefixes on the real S3 server (SeaweedFS): the same weights bit for bit
as one prefix, every key under a label, nothing left under any prefix after the cleanups."""

from __future__ import annotations

import contextlib
import copy
import uuid

import numpy as np
import torch

from fasdl.contract.keys import exchange_labels, merged_key, shard_key
from fasdl.exchange.channel.factory import build_channel
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.exchange.channel.spread import spread_keys
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.run.fencing import claim_worker, clean_dead_epochs
from fasdl.training.networks import build_model
from local.faults.injection import exchange_left
from local.servers.layout import LAYOUT
from local.servers.managed import SeaweedS3Server
from tests.runtime.kreduce_helpers import CLASSES, INPUT_SHAPE, drive, make_plan, random_batches

ITERATIONS, WORKERS, PREFIXES = 4, 4, 8


def _train(server: SeaweedS3Server, prefix: str, model: torch.nn.Module,
           key_prefixes: int) -> list[np.ndarray]:
    """Four workers (two aggregators, HAP) over S3 for a few iterations; the final weights,
    with the run's keys cleaned the way a later segment and finalize clean them."""
    plan = make_plan(WORKERS, 2, 3, 5, "hap")
    channels = [spread_keys(build_channel(server.channel_config(prefix=prefix),
                                          session=server.session()), key_prefixes)
                for _ in range(WORKERS)]
    try:
        for index in range(WORKERS):
            claim_worker(channels[index], "run-1", 5, index, f"request-{index}")
        workers = [KReduceWorker(plan, w, channels[w], copy.deepcopy(model), "run-1", 5,
                                 wait_timeout_s=60.0) for w in range(WORKERS)]
        drive(workers, random_batches(plan, ITERATIONS), range(ITERATIONS))
        for worker in workers:
            worker.close()
        stored = _listed(server, prefix)
        labels = {key[:3] for key in stored} if key_prefixes > 1 else {""}
        assert labels <= set(exchange_labels(key_prefixes)) and stored
        if key_prefixes > 1:  # the claims and the kept merged shards under several labels
            assert len(labels) > 1 and all(key[3:].startswith("run-1/5/") for key in stored)
        # the next segment's worker 0 deletes epoch 5; finalize deletes the rest of the run
        assert clean_dead_epochs(channels[0], "run-1", 6) == len(stored)
        assert channels[0].delete_prefix("run-1/") == 0
        assert _listed(server, prefix) == []
        return [worker.parameters.copy() for worker in workers]
    finally:
        for channel in channels:
            channel.close()


def _listed(server: SeaweedS3Server, prefix: str) -> list[str]:
    """Every key under the test's prefix, whatever its label, straight from the server."""
    client = server.client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=server.buckets[0],
                                                            Prefix=prefix)
    return [item["Key"][len(prefix):] for page in pages for item in page.get("Contents", [])]


def test_spread_keys_train_the_same_weights_and_leave_nothing(seaweed_server: SeaweedS3Server,
                                                              prefix: str) -> None:
    model = build_model("mlp", CLASSES, INPUT_SHAPE)  # both runs start from the same weights
    one = _train(seaweed_server, prefix, model, 1)
    spread = _train(seaweed_server, prefix, model, PREFIXES)
    for got, expected in zip(spread, one, strict=True):
        assert np.array_equal(got, expected)


def test_the_local_leftover_check_counts_keys_under_every_prefix(
        seaweed_server: SeaweedS3Server) -> None:
    """local runs report the keys finalize left (report.json exchange_left): labelled ones
    count, another run's do not."""
    client = seaweed_server.client()
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=LAYOUT.exchange_bucket)
    run, other = f"left-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    plain = S3Channel(LAYOUT.exchange_bucket, LAYOUT.exchange_prefix, client=client)
    spread = spread_keys(plain, 16)
    written = [shard_key(run, 2, 0, shard, worker) for shard in range(3) for worker in range(4)]
    for key in written:
        spread.put(key, b"x")
    plain.put(merged_key(run, 1, 0, 0), b"unlabelled")
    spread.put(merged_key(other, 2, 0, 0), b"another run")
    assert exchange_left(client, run, None) == len(written) + 1
    spread.delete_prefix(f"{run}/")
    plain.delete_prefix(f"{run}/")
    spread.delete_prefix(f"{other}/")
    assert exchange_left(client, run, None) == 0 == exchange_left(client, other, None)
