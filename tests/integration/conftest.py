"""Real servers for the integration tests, started once per session on free loopback ports."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from fasdl.exchange.channel.base import Channel
from fasdl.exchange.channel.factory import ChannelConfig, build_channel
from fasdl.exchange.channel.memory import MemoryChannel, MemoryStore
from fasdl.exchange.channel.s3 import S3Channel
from local.servers.managed import (
    ManagedServer,
    RedisTlsClusterServer,
    SeaweedS3Server,
    ServerBinaryMissing,
    ValkeyServer,
)

BACKENDS = ("memory", "valkey", "valkey-cluster", "redis-tls-cluster", "s3")
VALKEY_BACKENDS = ("valkey", "valkey-cluster", "redis-tls-cluster")


def _serve(make: Callable[[], ManagedServer]) -> Iterator[Any]:
    try:
        server = make()
    except ServerBinaryMissing as missing:
        problem = str(missing)
    else:
        problem = ""
    if problem:  # a missing server must fail the suite, never skip it silently
        pytest.fail(problem, pytrace=False)
    with server:
        yield server


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[ValkeyServer]:
    yield from _serve(ValkeyServer)


@pytest.fixture(scope="session")
def valkey_cluster_server() -> Iterator[ValkeyServer]:
    yield from _serve(lambda: ValkeyServer(cluster=True))


@pytest.fixture(scope="session")
def redis_tls_cluster_server() -> Iterator[RedisTlsClusterServer]:
    yield from _serve(RedisTlsClusterServer)


@pytest.fixture(scope="session")
def seaweed_server() -> Iterator[SeaweedS3Server]:
    yield from _serve(SeaweedS3Server)


@dataclass
class Backend:
    """One store under test: builds channels and reaches the store behind their back."""

    name: str
    server: Any
    ttl_s: int = 120

    def config(self, prefix: str) -> ChannelConfig:
        if self.name == "s3":
            config: ChannelConfig = self.server.channel_config(prefix=prefix)
            return config
        config = self.server.channel_config(prefix=prefix, ttl_s=self.ttl_s)
        return config

    def channel(self, prefix: str) -> Channel:
        if isinstance(self.server, MemoryStore):
            return MemoryChannel(prefix, self.server)
        session = self.server.session() if self.name == "s3" else None
        return build_channel(self.config(prefix), session=session)

    def raw_put(self, full_key: str, data: bytes) -> None:
        """Write straight into the store, bypassing the channel."""
        if isinstance(self.server, MemoryStore):
            self.server.values[full_key] = data
            return
        client = self.server.client()
        try:
            if self.name == "s3":
                client.put_object(Bucket=self.server.buckets[0], Key=full_key, Body=data)
            else:
                client.set(full_key, data)
        finally:
            client.close()


_SERVER_FIXTURE = {
    "valkey": "valkey_server",
    "valkey-cluster": "valkey_cluster_server",
    "redis-tls-cluster": "redis_tls_cluster_server",
    "s3": "seaweed_server",
}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":  # the unit-test stand-in must honour the same contract
        return Backend("memory", MemoryStore())
    return Backend(request.param, request.getfixturevalue(_SERVER_FIXTURE[request.param]))


@pytest.fixture
def prefix() -> str:
    """A fresh namespace per test, so tests sharing a server never see each other's keys."""
    return f"test-{uuid.uuid4().hex[:12]}/"


@pytest.fixture
def channel(backend: Backend, prefix: str) -> Iterator[Channel]:
    channel = backend.channel(prefix)
    yield channel
    channel.delete_prefix("")
    channel.close()


@pytest.fixture
def results_store(seaweed_server: SeaweedS3Server, prefix: str) -> Iterator[S3Channel]:
    """An S3 channel on SeaweedFS under a fresh prefix, as the results bucket's store."""
    channel = S3Channel(seaweed_server.buckets[0], prefix, client=seaweed_server.client())
    yield channel
    channel.delete_prefix("")
    channel.close()
