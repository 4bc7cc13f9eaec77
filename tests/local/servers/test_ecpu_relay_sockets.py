"""local.servers.ecpu_proxy forwards each chunk at once: both legs of every relayed connection have
Nagle's algorithm off. With it on, a value's short last chunk waited for the peer's (delayed)
ACK of the chunk before: bench.prediction's Valkey rows measured 16-19 % slower than predicted,
6-8 % with it off (docs/results.md)."""

from __future__ import annotations

import socket
import time

import pytest

from fasdl.exchange.channel.valkey import ValkeyChannel
from local.servers.ecpu_proxy import EcpuProxy
from local.servers.managed import HOST, ValkeyServer

pytestmark = pytest.mark.servers


def test_every_relayed_socket_has_nagle_off() -> None:
    with ValkeyServer(cluster=True) as valkey, EcpuProxy(valkey) as proxy:
        channel = ValkeyChannel(HOST, proxy.port, prefix="nodelay/", cluster=True)
        try:
            channel.put("value", b"x" * 70_000)  # a full chunk and a short one
            assert channel.get("value", time.monotonic() + 30) == b"x" * 70_000
        finally:
            channel.close()
        relayed = list(proxy._sockets)
        assert len(relayed) >= 2  # the client's leg and the server's of one connection
        for sock in relayed:
            if sock.fileno() != -1:
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
