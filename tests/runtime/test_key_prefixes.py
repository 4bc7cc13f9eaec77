"""Hashed exchange-key prefixes (fasdl.contract.keys.spread_key, fasdl.exchange.channel.spread)
and the S3 channel's count of throttled requests."""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest

from fasdl.contract.keys import (
    MAX_EXCHANGE_KEY_PREFIXES,
    KeyFormatError,
    exchange_labels,
    merged_key,
    shard_key,
    spread_key,
)
from fasdl.contract.plan import Deployment, PlanError
from fasdl.exchange.channel.memory import MemoryChannel
from fasdl.exchange.channel.s3 import S3Channel
from fasdl.exchange.channel.spread import SpreadChannel, spread_keys
from fasdl.run.fencing import claim_worker, clean_dead_epochs
from tests.runtime.kreduce_helpers import make_plan


def _iteration_keys(workers: int, aggregators: int, iteration: int) -> list[str]:
    """What one iteration of a K-REDUCE run writes: W·K shards and K merged shards."""
    return ([shard_key("run-1", 3, iteration, shard, worker) for worker in range(workers)
             for shard in range(aggregators)]
            + [merged_key("run-1", 3, iteration, shard) for shard in range(aggregators)])


@pytest.mark.parametrize("prefixes", [2, 7, 16, 64])
def test_an_iterations_keys_spread_evenly_over_the_prefixes(prefixes: int) -> None:
    keys = _iteration_keys(200, 20, 5)  # 4,020 keys
    counts = collections.Counter(spread_key(key, prefixes)[:3] for key in keys)
    assert set(counts) == set(exchange_labels(prefixes))
    mean = len(keys) / prefixes
    # a fair hash: every prefix within 30 % of the mean (binomial sd <= 8 % of it here)
    assert max(counts.values()) <= 1.3 * mean and min(counts.values()) >= 0.7 * mean, counts


def test_labels_are_stable_and_leave_the_key_readable() -> None:
    key = shard_key("run-1", 3, 12, 1, 7)
    # fixed values: the same label in every process and release (readers find the writers')
    assert spread_key(key, 16) == "0c/" + key
    assert spread_key(key, 256) == "8c/" + key
    assert spread_key(key, 1) == key  # old plans: the keys they always had
    assert spread_key(key, 16) == spread_key(key, 16)
    assert exchange_labels(1) == [""] and exchange_labels(3) == ["00/", "01/", "02/"]
    assert len(exchange_labels(MAX_EXCHANGE_KEY_PREFIXES)[-1]) == 3
    for bad in (0, MAX_EXCHANGE_KEY_PREFIXES + 1, 2.0, True):
        with pytest.raises(KeyFormatError, match=r"exchange_key_prefixes .*\[1, 256\]"):
            spread_key(key, bad)  # type: ignore[arg-type]


def test_the_plan_carries_the_prefixes_and_refuses_them_off_s3() -> None:
    plan = make_plan(4, 2, 3, 5, "hap")
    assert plan.training.exchange_key_prefixes == 1
    assert "exchange_key_prefixes" not in plan.to_dict()["training"]  # old plans unchanged
    spread = dataclasses.replace(plan, training=dataclasses.replace(
        plan.training, exchange_key_prefixes=8))
    assert spread.to_dict()["training"]["exchange_key_prefixes"] == 8
    assert type(plan).from_json(spread.to_json()).training.exchange_key_prefixes == 8
    with pytest.raises(PlanError, match=r"training.exchange_key_prefixes.*\[1, 256\].*got 300"):
        dataclasses.replace(plan.training, exchange_key_prefixes=300).validate(4)
    valkey = Deployment(**{**dataclasses.asdict(plan.deployment), "channel": "valkey"})
    with pytest.raises(PlanError, match=r"exchange_key_prefixes.*must be 1 on the valkey"):
        dataclasses.replace(spread, deployment=valkey)


def test_the_spread_channel_labels_every_key_and_cleans_every_prefix() -> None:
    inner = MemoryChannel()
    channel = spread_keys(inner, 4)
    assert isinstance(channel, SpreadChannel) and spread_keys(inner, 1) is inner
    keys = _iteration_keys(6, 3, 0) + _iteration_keys(6, 3, 1)
    for key in keys:
        channel.put(key, key.encode())
    claim_worker(channel, "run-1", 3, 0, "request")
    assert all(channel.try_get(key) == key.encode() for key in keys)
    assert inner.try_get(keys[0]) is None and inner.try_get(spread_key(keys[0], 4)) is not None
    channel.delete(keys[:5])
    assert all(channel.try_get(key) is None for key in keys[:5])
    other = spread_key(shard_key("run-2", 3, 0, 0, 0), 4)
    inner.put(other, b"another run")
    assert clean_dead_epochs(channel, "run-1", 4) == len(keys) - 5 + 1  # and the claim
    assert inner.try_get(other) == b"another run"


class _SlowDownTwice(BaseHTTPRequestHandler):
    """An S3 endpoint that answers the first PUT 503 Slow Down, as S3 does while it
    partitions a prefix."""

    answered = 0

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).answered += 1
        if type(self).answered <= 1:
            body = (b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate."
                    b"</Message></Error>")
            self.send_response(503)
        else:
            body = b""
            self.send_response(200)
            self.send_header("ETag", '"0"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_down_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowDownTwice)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_throttled_requests_are_retried_and_counted(slow_down_endpoint: str) -> None:
    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test")
    channel = S3Channel("bucket", "exchange/", endpoint_url=slow_down_endpoint,
                        path_style=True, session=session)
    spread = spread_keys(channel, 4)
    assert spread.throttled_retries == 0
    spread.put("run-1/3/it/00000000/merged/000", b"frame")  # adaptive mode retries 503s
    assert channel.throttled_retries == spread.throttled_retries == 1
    assert MemoryChannel().throttled_retries == 0
    channel.close()
