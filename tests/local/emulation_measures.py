"""Measuring the Lambda emulation against references taken beside it, so that load on the
machine does not fail a test (test_lambda_speed.py): a CPU share beside an uncapped child's,
a shaped transfer's time beside its server's part of it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterable

from fasdl.exchange.channel.base import Channel
from local.lambda_.throttle import CpuThrottle

# A busy loop (or a sleepy one) that reports its own CPU seconds per wall second.
LOOP = textwrap.dedent("""
    import sys, time
    mode, seconds = sys.argv[1], float(sys.argv[2])
    wall, cpu = time.monotonic(), time.process_time()
    while time.monotonic() - wall < seconds:
        if mode == "sleep":
            time.sleep(0.02)
    print((time.process_time() - cpu) / (time.monotonic() - wall), time.monotonic() - wall)
""")

# The emulated functions' handlers (the file emulated_lambdas.py): a busy loop reporting its
# CPU share, and a shaped put and get timed with the server's part of each.
HANDLERS = textwrap.dedent("""
    import os, time
    from fasdl.contract.settings import Settings
    from fasdl.exchange import stores

    def busy(event, context):
        wall, cpu = time.monotonic(), time.process_time()
        while time.monotonic() - wall < event["seconds"]:
            pass
        return {"ratio": (time.process_time() - cpu) / (time.monotonic() - wall),
                "threads": os.environ.get("OMP_NUM_THREADS")}

    def transfer(event, context):
        channel = stores.exchange_channel(Settings.from_env())  # as the worker builds it
        server = [0.0]  # the server's part: the shaped channel's calls into its inner one

        def timed(method):
            def call(*args):
                began = time.monotonic()
                try:
                    return method(*args)
                finally:
                    server[0] += time.monotonic() - began
            return call

        channel.inner.put, channel.inner.try_get = (timed(channel.inner.put),
                                                    timed(channel.inner.try_get))
        began = time.monotonic()
        channel.put("k", b"x" * event["size"])
        put_s, put_server_s = time.monotonic() - began, server[0]
        began = time.monotonic()
        assert len(channel.get("k", time.monotonic() + 10)) == event["size"]
        return {"channel": type(channel).__name__, "put_s": put_s,
                "get_s": time.monotonic() - began, "put_server_s": put_server_s,
                "get_server_s": server[0] - put_server_s,
                "threads": os.environ.get("OMP_NUM_THREADS")}
""")


def loop(mode: str, share: float | None, seconds: float = 2.0) -> tuple[float, float]:
    """(CPU seconds per wall second, wall seconds the throttle held it) of a child looping
    ``seconds`` under the cap (``share`` None: uncapped)."""
    child = subprocess.Popen([sys.executable, "-c", LOOP, mode, str(seconds)],
                             stdout=subprocess.PIPE, start_new_session=True)
    throttle = CpuThrottle(child.pid, share).start() if share else None
    try:
        out, _ = child.communicate(timeout=30)
    finally:
        if throttle is not None:
            throttle.stop()
    ratio, _ = map(float, out.split())
    return ratio, throttle.stopped_s if throttle is not None else 0.0


def beside_uncapped(capped: Callable[[], float], seconds: float = 2.0) -> tuple[float, float]:
    """``capped()``'s CPU share, and an uncapped busy child's (looping ``seconds``) measured at
    the same time: what this machine gives a process just then, loaded or not."""
    uncapped: list[float] = []
    reference = threading.Thread(target=lambda: uncapped.append(loop("busy", None, seconds)[0]))
    reference.start()
    try:
        share = capped()
    finally:
        reference.join()
    return share, uncapped[0]


def assert_held_to(share: float, cap: float, uncapped: float) -> None:
    """Never above the cap; at it, or at what an uncapped process got when that was less (a
    saturated machine cannot give any share)."""
    assert share <= cap + 0.06, (share, uncapped)
    assert share >= 0.75 * min(cap, uncapped), (share, uncapped)


def within(measured: float, target: float, slack_s: float = 0.0, real_s: float = 0.0) -> bool:
    """Never early; at most 15% (or 5 ms, for tiny targets) + ``slack_s`` late: late against
    the target, or against ``real_s``, the server's part of the same transfer, when that took
    longer (shaping only slows down; a loaded machine slows the server)."""
    ceiling = max(target, real_s)
    return target - 1e-3 <= measured <= ceiling + max(0.15 * ceiling, 0.005) + slack_s


def timed(action: Callable[..., object], *args: object) -> float:
    began = time.monotonic()
    action(*args)
    return time.monotonic() - began


class ServerTime(Channel):
    """``inner``, adding up the seconds its calls take (``spent_s``, all threads): the
    server's part of what a :class:`ShapedChannel` around it does."""

    def __init__(self, inner: Channel) -> None:
        self.inner = inner
        self.backoff = inner.backoff
        self.spent_s = 0.0
        self._lock = threading.Lock()

    def _add(self, began: float) -> None:
        with self._lock:
            self.spent_s += time.monotonic() - began

    def put(self, key: str, data: bytes | bytearray) -> None:
        began = time.monotonic()
        try:
            self.inner.put(key, data)
        finally:
            self._add(began)

    def put_if_absent(self, key: str, data: bytes | bytearray) -> bool:
        return self.inner.put_if_absent(key, data)

    def try_get(self, key: str) -> bytes | None:
        began = time.monotonic()
        try:
            return self.inner.try_get(key)
        finally:
            self._add(began)

    def delete(self, keys: Iterable[str]) -> None:
        self.inner.delete(keys)

    def delete_prefix(self, prefix: str) -> int:
        return self.inner.delete_prefix(prefix)

    def list_keys(self, prefix: str) -> list[str]:
        return self.inner.list_keys(prefix)

    def close(self) -> None:
        self.inner.close()
