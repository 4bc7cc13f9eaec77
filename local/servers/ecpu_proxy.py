"""The local Valkey behind a relay that meters ElastiCache Processing Units and holds them to the
cache's ECPU/s maximum, as ElastiCache Serverless does: "When you set an ECPU/second maximum and
the compute utilization of your workload exceeds this value, ElastiCache will begin throttling
requests" (https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/Scaling.html).

ECPUs are metered as ElastiCache bills simple reads and writes, one ECPU per KB transferred
(planner/model/terms/cache_throughput.py has the same rule): every chunk a client sends counts
at least one (a command; pipelined commands in one chunk are undercounted, which only makes the
throttle milder), and every KB either way one more. A token bucket refills at the maximum with
one second of burst; a chunk that finds the bucket empty waits until its ECPUs are paid, so a
plan past its cap runs slower, not wrong. A plan that charged a fresh cache's ramp
(``prediction.cache_ramp_s`` > 0, planner/model/terms/cache_ramp.py) gets a bucket that ramps as
ElastiCache's user guide says a new cache does, by the numbers the plan charged
(``prediction.cache_fresh_ecpu_per_s``, ``cache_ramp_doubling_s``; AWS's are 30,000 ECPU/s
doubling about every 150 s): it serves the fresh rate, doubling every interval from the first
write (the run's first exchange, where the planner starts the ramp; the connections' slot-map
requests come seconds earlier) until the maximum. The time held back is kept per interval of
the ramp (:attr:`EcpuBucket.held_back_by_interval`, the last entry from the interval that
reaches the maximum to the run's end), so a run shows the throttle fading. Every request
also pays in its key's hash slot, held to the plan's per-slot rate
(``prediction.cache_slot_ecpu_per_s``; local/servers/slot_meter.py).

The cluster announces the relay's port (``cluster-announce-port``), so a cluster client's
redirections come back through it too; a restarted server (a chaos fault) forgets that, and
clients that then reconnect from its slot map go around the relay, unmetered.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from contextlib import closing, suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import redis

from local.servers.managed import HOST, RedisTlsClusterServer, ValkeyServer
from local.servers.slot_meter import KB, SlotConnection, SlotMeter

BURST_S = 1.0  # the bucket holds one second of the maximum
CHUNK = 64 * KB
# A stream pays a chunk, then forwards it, then pays the next: the time between (a late
# wake-up, 0.1-0.3 ms per 64 KB chunk here; the forwarding itself, about a chunk's slot time)
# is the slot serving on. Without credit for it a slot served 16 % under its rate (measured at
# 80 MB/s) and a transfer took its slot time plus its forwarding instead of the larger (a 4.7
# MB GET: 0.127 s against 0.059 and 0.065). A payer back within this much of its debt being
# paid keeps up to this much credit; an idle bucket gets none.
LATE_S = 0.005


@dataclass(frozen=True)
class Ramp:
    """A fresh cache: ``fresh`` ECPU/s from its first request, doubling every ``doubling_s``."""

    fresh: float
    doubling_s: float

    def rate(self, since_first_s: float) -> float:
        return self.fresh * 2.0 ** math.floor(since_first_s / self.doubling_s)


class EcpuBucket:
    """ECPUs metered and paid for at ``rate`` per second (None: metered, never held back), or
    along a fresh cache's :class:`Ramp` up to ``rate``."""

    def __init__(self, rate: float | None, burst_s: float = BURST_S) -> None:
        self.rate = rate
        self.burst_s = burst_s
        self.ramp: Ramp | None = None
        self.used: float = 0
        self.throttled_s = 0.0
        # seconds held back in each doubling interval from the ramp's first request
        self.held_back_by_interval: list[float] = []
        self._tokens = rate * burst_s if rate else 0.0
        self._stamp = time.monotonic()
        self._paid_up = -math.inf  # when the last payer's debt was paid
        self._first: float | None = None  # the first request after set_rate: the ramp's start
        self._lock = threading.Lock()

    def set_rate(self, rate: float | None, ramp: Ramp | None = None) -> None:
        """Hold to ``rate`` from now on, starting with a full bucket; with ``ramp``, a fresh
        cache's rate until that reaches ``rate``."""
        with self._lock:
            self.rate, self.ramp, self._first = rate, ramp, None
            self.held_back_by_interval = []
            self._stamp, self._paid_up = time.monotonic(), -math.inf
            self._tokens = self._rate_at(self._stamp) * self.burst_s

    def _rate_at(self, now: float) -> float:
        cap = self.rate or math.inf
        if self.ramp is None:
            return cap if self.rate else 0.0
        if self._first is None:
            return min(cap, self.ramp.fresh)
        return min(cap, self.ramp.rate(now - self._first))

    def start_ramp(self) -> None:
        """The ramp's clock starts now (once): the relay calls it at the first write, the
        run's first exchange, where the planner starts it (cache_ramp.py)."""
        with self._lock:
            if self._first is None:
                self._first = time.monotonic()

    def pay(self, ecpus: float, *, starts_ramp: bool = True) -> None:
        """Take ``ecpus``; sleep for the debt when the bucket runs short. ``starts_ramp``:
        a ramp not started yet starts with this request."""
        with self._lock:
            self.used += ecpus
            if not self.rate and self.ramp is None:
                return
            now = time.monotonic()
            if self._first is None and starts_ramp:
                self._first = now
            rate = self._rate_at(now)
            refill = self._tokens + (now - self._stamp) * rate
            cap = rate * self.burst_s
            if now - self._paid_up <= LATE_S:  # a stream going on (LATE_S)
                cap = max(cap, LATE_S * rate)
            self._tokens = min(cap, refill) - ecpus
            self._stamp = now
            wait = -self._tokens / rate if self._tokens < 0 else 0.0
            self._paid_up = now + wait
            self.throttled_s += wait
            self._book(now, wait)
        if wait:
            time.sleep(wait)

    def _book(self, now: float, wait: float) -> None:
        """Count ``wait`` in the ramp interval ``now`` falls in; once the ramp has reached the
        maximum, in one last entry for the rest of the run."""
        if self.ramp is None or self._first is None or now < self._first:
            return
        interval = int((now - self._first) // self.ramp.doubling_s)
        if self.rate:  # the first interval whose rate reaches the maximum takes the rest
            interval = min(interval, max(0, math.ceil(math.log2(self.rate / self.ramp.fresh))))
        while len(self.held_back_by_interval) <= interval:
            self.held_back_by_interval.append(0.0)
        self.held_back_by_interval[interval] += wait


def ecpus_of(chunk_bytes: int, *, request: bool) -> int:
    """One ECPU per KB; a request costs at least one."""
    kilobytes = math.ceil(chunk_bytes / KB)
    return max(1, kilobytes) if request else kilobytes


class EcpuProxy:
    """A TCP relay on a loopback port in front of ``cache`` (module docstring)."""

    def __init__(self, cache: ValkeyServer | RedisTlsClusterServer,
                 ecpu_per_second: float | None = None) -> None:
        self.cache = cache
        self.bucket = EcpuBucket(ecpu_per_second)
        # per hash slot: metered, held once set, without burst (a slot serves its rate); the
        # first write starts a fresh cache's ramp
        self.slots = SlotMeter(None, lambda rate: EcpuBucket(rate, burst_s=0.0),
                               on_write=self.bucket.start_ramp)
        self._listener = socket.create_server((HOST, 0))
        self.port: int = self._listener.getsockname()[1]
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def __enter__(self) -> Self:
        threading.Thread(target=self._accept, name="ecpu-proxy", daemon=True).start()
        self.announce()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._closing.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with suppress(OSError):
                    sock.close()

    def announce(self) -> None:
        """Make the cluster hand out the relay's port (again after a server restart)."""
        setting = "cluster-announce-tls-port" if self.cache.tls else "cluster-announce-port"
        with closing(redis.Redis(host=HOST, port=self.cache.port, ssl=self.cache.tls,
                                 ssl_ca_certs=self.cache.ca_cert)) as client:
            client.config_set(setting, self.port)

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection((HOST, self.cache.port))
            except OSError:
                continue
            for sock in (client, server):  # forward each chunk at once: with Nagle a value's
                # short last chunk waited for the ACK of the one before (measured: +19 % on a
                # Valkey epoch at 4.7 MB values, bench.prediction)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
            metered = self.slots.connection()  # both directions, paired per command
            for source, sink, request in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(source, sink, request, metered),
                                 daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, request: bool,
              metered: SlotConnection) -> None:
        feed = metered.feed_request if request else metered.feed_reply
        with suppress(OSError):
            while chunk := source.recv(CHUNK):
                feed(chunk)  # pays the values' slots before their bytes go on
                # a connection whose SETs are not seen starts a fresh cache's ramp itself
                self.bucket.pay(ecpus_of(len(chunk), request=request),
                                starts_ramp=metered.blind)
                sink.sendall(chunk)
        for sock in (source, sink):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def describe(self) -> str:
        cap = f"{self.bucket.rate:,.0f}/s" if self.bucket.rate else "none"
        ramp = self.bucket.ramp
        fresh = ("" if ramp is None else f", a fresh cache from {ramp.fresh:,.0f}/s doubling "
                                         f"every {ramp.doubling_s:g} s")
        by_interval = ("" if ramp is None else ", per ramp interval " + " / ".join(
            f"{seconds:.1f}" for seconds in self.bucket.held_back_by_interval) + " s")
        slots = self.slots
        per_slot = f"{slots.ecpu_per_s:,.0f}/s" if slots.ecpu_per_s else "none"
        busiest = max(slots.by_slot.values(), default=0)
        unparsed = f", {slots.unparsed} connections not parsed" if slots.unparsed else ""
        return (f"cache ECPUs {self.bucket.used:,.0f} (maximum {cap}{fresh}), held back "
                f"{self.bucket.throttled_s:.1f} s at the maximum{by_interval}; per hash slot "
                f"(maximum {per_slot}) the busiest {busiest:,.0f} ECPUs, held back "
                f"{slots.held_back_s:.1f} s in all{unparsed}")

    def summary(self) -> dict[str, object]:
        """What the relay metered, for the run's ``cache.json`` (local/run/run_servers.py)."""
        ramp = self.bucket.ramp
        slots = self.slots
        return {"ecpus": self.bucket.used, "ecpu_per_s_maximum": self.bucket.rate,
                "held_back_s": round(self.bucket.throttled_s, 3),
                "slots": {"ecpu_per_s_maximum": slots.ecpu_per_s,
                          "held_back_s": round(slots.held_back_s, 3),
                          "busiest_ecpus": round(max(slots.by_slot.values(), default=0)),
                          "unparsed_connections": slots.unparsed},
                "ramp": None if ramp is None else {
                    "fresh_ecpu_per_s": ramp.fresh, "doubling_s": ramp.doubling_s,
                    "held_back_s_by_interval": [round(seconds, 3) for seconds
                                                in self.bucket.held_back_by_interval]}}
