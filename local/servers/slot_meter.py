"""ElastiCache Serverless's per-hash-slot ceiling, emulated in the ECPU relay
(local/servers/ecpu_proxy.py): every request is paid for in its key's slot as well as in the
cache's bucket, so a key that all workers read at once (a merged shard) is held to the slot's
rate. AWS's "Scaling ElastiCache" page gives about 30,000 ECPU/s per slot (90,000 with
READONLY replica reads); a plan carries the figure it charged
(``prediction.cache_slot_ecpu_per_s``, planner/model/terms/hot_key.py).

The relay sees bytes, not commands. Each client connection's requests are parsed as they pass
(RESP arrays of bulk strings, as every Redis/Valkey client sends them): the command and its key
are kept, a value is counted, never buffered. ``SET key value``: the value's ECPUs go to the
key's slot, and its size is remembered; ``GET key``: the remembered size's ECPUs (1 when the
value never came through the relay). The slot's bucket is paid *before* the request is
forwarded, so a throttled GET's reply comes later, as on AWS; it has no burst (AWS documents
none per slot, and the exchange's keys are new every iteration: a second of burst per key
would hide the ceiling), so a key's W−1 concurrent reads end (W−1)·e/R after they start, the
planner's floor. Other commands cost their slot 1
ECPU; a connection whose bytes are not RESP arrays is left unmetered per slot (counted in
:attr:`SlotMeter.unparsed`, which the relay's report shows).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from redis.crc import key_slot

KB = 1024
KEPT_ARGUMENT = 512  # bytes of an argument kept to read a command's name or key


class Bucket(Protocol):
    throttled_s: float

    def pay(self, ecpus: int) -> None: ...


def ecpus_of_value(size: int) -> int:
    """A read or write of ``size`` bytes: 1 ECPU per KB, at least 1."""
    return max(1, math.ceil(size / KB))


@dataclass
class _Command:
    """The request being parsed: its argument count, the ones read, the current one."""

    arguments: int
    done: int = 0
    kept: list[bytes] = field(default_factory=list)
    remaining: int = -1  # bytes left of the current argument (+ CRLF); -1: reading a header
    header: bytes = b""
    current: bytes = b""


class RequestParser:
    """Streams one connection's requests; calls ``on_request(command, key, value_size)`` once
    per command, as soon as its key and (SET) its value's length are known."""

    def __init__(self, on_request: Callable[[bytes, bytes, int | None], None]) -> None:
        self._on_request = on_request
        self._command: _Command | None = None
        self._line = b""
        self.broken = False  # not RESP arrays: no per-slot metering on this connection

    def feed(self, data: bytes) -> None:
        position = 0
        while position < len(data) and not self.broken:
            position = self._step(data, position)

    def _step(self, data: bytes, position: int) -> int:
        command = self._command
        if command is None or command.remaining < 0:
            end = data.find(b"\n", position)
            if end < 0:
                self._line += data[position:]
                return len(data)
            line, self._line = self._line + data[position:end + 1], b""
            self._header(line)
            return end + 1
        take = min(command.remaining, len(data) - position)
        if len(command.current) < KEPT_ARGUMENT:
            command.current += data[position:position + take][:KEPT_ARGUMENT]
        command.remaining -= take
        if command.remaining == 0:
            self._argument_done(command)
        return position + take

    def _header(self, line: bytes) -> None:
        kind, text = line[:1], line[1:].strip()
        if not text.lstrip(b"-").isdigit() or kind not in (b"*", b"$"):
            self.broken = True
            return
        count = int(text)
        if kind == b"*":
            self._command = _Command(arguments=count) if count > 0 else None
            return
        command = self._command
        if command is None or count < 0:
            self.broken = True
            return
        command.remaining, command.current = count + 2, b""  # the value and its CRLF
        if command.done == 2 and command.arguments >= 3 and command.kept[0].upper() == b"SET":
            self._on_request(b"SET", command.kept[1], count)  # the value's size is known

    def _argument_done(self, command: _Command) -> None:
        if command.done < 2:
            command.kept.append(command.current[:-2])
        command.done += 1
        command.remaining = -1
        name = command.kept[0].upper() if command.kept else b""
        if command.done == 2 and (name != b"SET" or command.arguments < 3):
            self._on_request(name, command.kept[1], None)
        if command.done == command.arguments:
            if command.arguments == 1:  # a command without a key (PING): slot 0
                self._on_request(name, b"", None)
            self._command = None


class SlotMeter:
    """Per-slot buckets at ``ecpu_per_s`` (None: metered, never held back) and the sizes of
    the values that came through; ``bucket`` makes each slot's bucket (the relay's)."""

    def __init__(self, ecpu_per_s: float | None, bucket: Callable[[float | None], Bucket], *,
                 on_write: Callable[[], None] = lambda: None) -> None:
        self.ecpu_per_s = ecpu_per_s
        self._make = bucket
        self._on_write = on_write  # told of every SET before it is paid
        self._buckets: dict[int, Bucket] = {}
        self._sizes: dict[bytes, int] = {}
        self._lock = threading.Lock()
        self.by_slot: dict[int, int] = {}  # ECPUs per slot, for the report
        self.unparsed = 0  # connections whose bytes were not RESP arrays

    def set_rate(self, ecpu_per_s: float | None) -> None:
        with self._lock:
            self.ecpu_per_s, self._buckets = ecpu_per_s, {}

    def ecpus(self, command: bytes, key: bytes, value_size: int | None) -> int:
        """The ECPUs a request costs its slot (module docstring); remembers a SET's size."""
        if command == b"SET" and value_size is not None:
            self._on_write()
            with self._lock:
                self._sizes[key] = value_size
            return ecpus_of_value(value_size)
        if command == b"GET":
            with self._lock:
                return ecpus_of_value(self._sizes.get(key, 0))
        return 1

    def pay(self, command: bytes, key: bytes, value_size: int | None) -> None:
        """Hold the request until its slot has served its ECPUs."""
        slot = key_slot(key) if key else 0
        ecpus = self.ecpus(command, key, value_size)
        with self._lock:
            self.by_slot[slot] = self.by_slot.get(slot, 0) + ecpus
            bucket = self._buckets.get(slot)
            if bucket is None:
                bucket = self._buckets[slot] = self._make(self.ecpu_per_s)
        bucket.pay(ecpus)

    @property
    def held_back_s(self) -> float:
        """Seconds requests waited for their slot, all slots together."""
        with self._lock:
            return sum(bucket.throttled_s for bucket in self._buckets.values())

    def request_parser(self) -> RequestParser:
        """A parser for one client connection whose requests pay here."""
        return RequestParser(self.pay)
