"""ElastiCache Serverless's per-hash-slot ceiling, emulated in the ECPU relay
(local/servers/ecpu_proxy.py): every value is paid for in its key's slot as it streams, so a
key that all workers read at once (a merged shard) is held to the slot's rate, and so is one
large transfer. AWS's "Scaling ElastiCache" page gives about 30,000 ECPU/s per slot (90,000
with READONLY replica reads); a plan carries the figure it charged
(``prediction.cache_slot_ecpu_per_s``, planner/model/terms/cache_throughput.py).

The relay sees bytes, not commands. Each client connection's requests are parsed as they pass
(RESP arrays of bulk strings, as every Redis/Valkey client sends them): the command and its key
are kept, a value is counted, never buffered. A SET's value pays its key's slot as its bytes go
to the server, one ECPU per KB; every command is queued in order, and the server's replies,
parsed the same way (RESP2 and RESP3: lines, bulk strings, nested aggregates), are paired
with them first in, first out: a GET's reply pays its key's slot as its bytes go back (a
miss moves nothing).
Paying blocks the stream until the slot has the ECPUs, so a throttled transfer runs at the
slot's rate, as on AWS; the bucket has no burst (AWS documents none per slot, and the
exchange's keys are new every iteration: a second of burst per key would hide the ceiling).
A connection whose bytes are not RESP is left unmetered per slot (counted in
:attr:`SlotMeter.unparsed`, which the relay's report shows).

Parsing costs the relay's CPU on every chunk (measured: +0.4 s on a 1.8 s pipelined Valkey
epoch, bench.prediction), so a connection stops parsing for good once nothing needs it: no
slot ceiling below :data:`NO_CEILING` and the first SET seen (a fresh cache's ramp starts
there). Then :attr:`SlotMeter.by_slot` holds only what passed before.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from redis.crc import key_slot

from fasdl.contract.cache import MAX_ECPU_PER_SECOND

KB = 1024
# a slot at ElastiCache's maximum for a whole cache (15 M ECPU/s, ~15 GB/s) is no ceiling here
NO_CEILING = float(MAX_ECPU_PER_SECOND)
KEPT_ARGUMENT = 512  # bytes of an argument kept to read a command's name or key


class Bucket(Protocol):
    throttled_s: float

    def pay(self, ecpus: float) -> None: ...


@dataclass
class _Command:
    """The request being parsed: its argument count, the ones read, the current one."""

    arguments: int
    done: int = 0
    kept: list[bytes] = field(default_factory=list)
    remaining: int = -1  # bytes left of the current argument (+ CRLF); -1: reading a header
    current: bytes = b""

    @property
    def name(self) -> bytes:
        return self.kept[0].upper() if self.kept else b""

    def in_set_value(self) -> bool:
        return self.done == 2 and self.arguments >= 3 and self.name == b"SET"


class RequestParser:
    """Streams one connection's requests: ``on_request(command, key)`` once per command, as
    soon as its key is known (b"" for none), and ``on_value(key, nbytes)`` for the bytes of a
    SET's value as they pass."""

    def __init__(self, on_request: Callable[[bytes, bytes], None],
                 on_value: Callable[[bytes, int], None]) -> None:
        self._on_request, self._on_value = on_request, on_value
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
        if command.in_set_value():
            self._on_value(command.kept[1], take)
        elif len(command.current) < KEPT_ARGUMENT:
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

    def _argument_done(self, command: _Command) -> None:
        if command.done < 2:
            command.kept.append(command.current[:-2])
        command.done += 1
        command.remaining = -1
        if command.done == min(2, command.arguments):
            self._on_request(command.name, command.kept[1] if command.done == 2 else b"")
        if command.done == command.arguments:
            self._command = None


# RESP2 and RESP3 reply types (the cluster client speaks RESP3): one line; a length-prefixed
# body; n elements (a map n pairs; an attribute n pairs and then the reply it qualifies)
LINES = (b"+", b"-", b":", b"_", b",", b"#", b"(")
BULKS = (b"$", b"=", b"!")
AGGREGATES = {b"*": 1, b"~": 1, b">": 1, b"%": 2, b"|": 2}


class ReplyParser:
    """Streams one connection's replies (RESP2 and RESP3): ``on_body(nbytes)`` for the bytes of
    a bulk string as they pass, ``on_reply()`` when a whole top-level reply has passed."""

    def __init__(self, on_body: Callable[[int], None], on_reply: Callable[[], None]) -> None:
        self._on_body, self._on_reply = on_body, on_reply
        self._line = b""
        self._body = 0  # bytes left of a bulk string (+ CRLF)
        self._open: list[int] = []  # elements left of each array being read
        self.broken = False

    def feed(self, data: bytes) -> None:
        position = 0
        while position < len(data) and not self.broken:
            if self._body:
                take = min(self._body, len(data) - position)
                self._on_body(take)
                self._body -= take
                position += take
                if not self._body:
                    self._element_done()
                continue
            end = data.find(b"\n", position)
            if end < 0:
                self._line += data[position:]
                return
            line, self._line = self._line + data[position:end + 1], b""
            position = end + 1
            self._header(line)

    def _header(self, line: bytes) -> None:
        kind, text = line[:1], line[1:].strip()
        if kind in LINES:
            self._element_done()
        elif kind in BULKS + tuple(AGGREGATES) and text.lstrip(b"-").isdigit():
            count = int(text)
            elements = count * AGGREGATES.get(kind, 1) + (1 if kind == b"|" else 0)
            if count < 0 or (kind in AGGREGATES and elements == 0):
                self._element_done()  # a miss, a null or an empty aggregate
            elif kind in BULKS:
                self._body = count + 2
            else:
                self._open.append(elements)
        else:
            self.broken = True

    def _element_done(self) -> None:
        while self._open:
            self._open[-1] -= 1
            if self._open[-1]:
                return
            self._open.pop()
        self._on_reply()


class SlotMeter:
    """Per-slot buckets at ``ecpu_per_s`` (None: metered, never held back); ``bucket`` makes
    each slot's bucket (the relay's); ``on_write`` is told of every SET (a fresh cache's ramp
    starts with the first)."""

    def __init__(self, ecpu_per_s: float | None, bucket: Callable[[float | None], Bucket], *,
                 on_write: Callable[[], None] = lambda: None) -> None:
        self.ecpu_per_s = ecpu_per_s
        self._make = bucket
        self._on_write = on_write
        self._buckets: dict[int, Bucket] = {}
        self._lock = threading.Lock()
        self.by_slot: dict[int, float] = {}  # ECPUs per slot, for the report
        self.unparsed = 0  # connections whose bytes were not RESP
        self._written = False  # a SET has passed since the rate was set

    def set_rate(self, ecpu_per_s: float | None) -> None:
        with self._lock:
            self.ecpu_per_s, self._buckets, self._written = ecpu_per_s, {}, False

    @property
    def parsing_needed(self) -> bool:
        """A ceiling to hold, or the first SET still to see (module docstring)."""
        ceiling = self.ecpu_per_s is not None and self.ecpu_per_s < NO_CEILING
        return ceiling or not self._written

    def pay(self, slot: int, nbytes: int) -> None:
        """Hold the stream until ``slot`` has served ``nbytes`` (one ECPU per KB)."""
        ecpus = nbytes / KB
        with self._lock:
            self.by_slot[slot] = self.by_slot.get(slot, 0.0) + ecpus
            bucket = self._buckets.get(slot)
            if bucket is None:
                bucket = self._buckets[slot] = self._make(self.ecpu_per_s)
        bucket.pay(ecpus)

    def wrote(self) -> None:
        self._written = True
        self._on_write()

    @property
    def held_back_s(self) -> float:
        """Seconds streams waited for their slot, all slots together."""
        with self._lock:
            return sum(bucket.throttled_s for bucket in self._buckets.values())

    def connection(self) -> SlotConnection:
        return SlotConnection(self)


class SlotConnection:
    """One client connection's two streams, metered per slot (module docstring)."""

    def __init__(self, meter: SlotMeter) -> None:
        self._meter = meter
        self._pending: deque[int | None] = deque()  # per command in flight: a GET's slot
        self._reading: int | None = None  # the slot of the reply being read, if a GET's
        self._requests = RequestParser(self._request, self._value)
        self._replies = ReplyParser(self._body, self._reply_done)
        self._lock = threading.Lock()
        self._counted = False
        self._stopped = False  # parsing no longer needed: never resumed mid-message

    @property
    def broken(self) -> bool:
        return self._requests.broken or self._replies.broken

    @property
    def blind(self) -> bool:
        """Its SETs are not seen (not RESP, or parsing stopped)."""
        return not self._parsing()

    def _parsing(self) -> bool:
        if not self._stopped and not self._meter.parsing_needed:
            self._stopped = True
        return not self._stopped and not self.broken

    def feed_request(self, data: bytes) -> None:
        if self._parsing():
            self._requests.feed(data)
        self._count_broken()

    def feed_reply(self, data: bytes) -> None:
        if self._parsing():
            self._replies.feed(data)
        self._count_broken()

    def _count_broken(self) -> None:
        if self.broken and not self._counted:
            self._counted = True
            self._meter.unparsed += 1

    def _request(self, command: bytes, key: bytes) -> None:
        if command == b"SET":
            self._meter.wrote()
        with self._lock:
            self._pending.append(key_slot(key) if command == b"GET" else None)

    def _value(self, key: bytes, nbytes: int) -> None:
        self._meter.pay(key_slot(key), nbytes)

    def _body(self, nbytes: int) -> None:
        with self._lock:
            if self._reading is None and self._pending:
                self._reading = self._pending[0]
            slot = self._reading
        if slot is not None:
            self._meter.pay(slot, nbytes)

    def _reply_done(self) -> None:
        with self._lock:
            if self._pending:
                self._pending.popleft()
            self._reading = None
