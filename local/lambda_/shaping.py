"""Channel bandwidth shaping: a local channel that moves bytes as fast as Lambda would.

A platform profile models one object of S MB at memory M as taking S/tp(M, S) seconds, with
tp = p(M)·(1 − e^(−t(M)·S)) (planner/model/inputs/profiles.py). :class:`ShapedChannel` wraps a
real channel and makes every transfer last at least that long: ``put`` uses the upload
direction, a hit of ``try_get``/``get`` the download direction. A miss moves no payload and is
not charged.

Each direction is one link (:class:`Link`): transfers reserve consecutive slots on it
(start = max(call start, link free), free = start + target), so concurrent transfers in one
direction take about the sum of their targets, like one function's NIC. The two directions
overlap as far as the profile's ``duplex`` says (1, full duplex, unless the profiler measured
less): both also hold a shared link (:meth:`BandwidthShaper.reserve`). The call returns at the
end of its slot, sleeping whatever the real operation left. Shaping only slows down: when the
local server is slower than the target, the real time stands.

Visibility: on S3 or Valkey an object can be read only once its upload is over. The real put
here finishes early in the slot, so a 12-byte marker written just before the value, under
its key plus ``VISIBLE_SUFFIX``, carries the wall-clock time the slot ends (``time.time()``
is shared by every process of the machine), and a shaped reader that finds the value sooner
waits until then. Without this, a BSP aggregator read its peers' shards at the start of their
uploads and iterations ran well under what the shaped bandwidth allows. A value without a
marker passes through at once. The marker is a separate object, not a prefix, so a frame is
never copied to prepend it or to strip it: with one copy per put and get a large model's
aggregator ran out of a memory size that fits it on Lambda, which makes no such copies
(measured: docs/results.md, "Measurements behind design choices").
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterable

from fasdl.exchange.channel.base import Channel
from planner.model.inputs.profiles import Direction, PlatformProfile

MB = 2**20
_VISIBLE = struct.Struct("<4sd")  # magic, wall-clock time the upload's slot ends
_MAGIC = b"FSHP"
VISIBLE_SUFFIX = ".fshp-visible"  # the key beside each shaped value that holds that time
Clock = Callable[[], float]


class Link:
    """One direction's timeline; thread-safe."""

    def __init__(self) -> None:
        self._free_at = float("-inf")
        self._lock = threading.Lock()

    def reserve(self, began: float, seconds: float) -> float:
        """The end of a ``seconds`` long slot starting no earlier than ``began``."""
        with self._lock:
            start = max(began, self._free_at)
            self._free_at = start + seconds
            return self._free_at


SHARED_PIECES = 8  # pieces a transfer's use of the shared link is spread in


class SharedLink:
    """What both directions share below full duplex: a reservation fills the free time from its
    start on, across gaps, like a share of a link used while other transfers run (a
    :class:`Link` keeps only its end, so later slots would block earlier ones). Thread-safe."""

    HISTORY_S = 60.0  # intervals that ended this long before a request are forgotten

    def __init__(self) -> None:
        self._busy: list[tuple[float, float]] = []  # sorted, disjoint
        self._lock = threading.Lock()

    def reserve(self, began: float, seconds: float) -> float:
        """The moment ``seconds`` of free time after ``began`` have been used."""
        with self._lock:
            busy = [(a, b) for a, b in self._busy if b > began - self.HISTORY_S]
            now, remaining, pieces = began, seconds, []
            for low, high in busy:
                if high <= now:
                    continue
                if low > now:  # a gap: use it
                    take = min(remaining, low - now)
                    pieces.append((now, now + take))
                    remaining, now = remaining - take, now + take
                    if remaining <= 0:
                        break
                now = max(now, high)
            if remaining > 0:
                pieces.append((now, now + remaining))
                now += remaining
            self._busy = sorted(busy + pieces)
            return now


class BandwidthShaper:
    """Targets from the profile at one memory size, one :class:`Link` per direction.

    One shaper per process: every channel of an invocation shares its links.
    """

    def __init__(self, platform: PlatformProfile, memory_mb: float, *,
                 clock: Clock = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.platform = platform
        self.memory_mb = float(memory_mb)
        self.links: dict[Direction, Link] = {"up": Link(), "down": Link()}
        self.shared = SharedLink()  # what the two directions share (the profile's duplex)
        self.duplex = float(platform.duplex_at(self.memory_mb))
        self.clock = clock
        self.sleep = sleep

    def target_s(self, direction: Direction, size_bytes: int) -> float:
        return float(self.platform.transfer_time(direction, self.memory_mb, size_bytes / MB))

    def reserve(self, direction: Direction, began: float, size_bytes: int) -> float:
        """The end of this transfer's slot (shaper clock): on its direction's link for its
        target time T, and on the link both directions share for (1 − d/2)·T, d the profile's
        duplex. An upload of U seconds beside a download of D then takes
        max(U, D, (1 − d/2)·(U + D)), the planner's U ∥ D (planner/model/terms/pipelined.py);
        at d = 1 the shared link never binds."""
        target = self.target_s(direction, size_bytes)
        own = self.links[direction].reserve(began, target)
        if self.duplex >= 1.0:
            return own  # full duplex: the shared link could never bind
        # The shared part is used along the transfer's own slot, in pieces released one after
        # another, so transfers in both directions progress together (not one after the other).
        start, share = own - target, (1.0 - self.duplex / 2.0) * target / SHARED_PIECES
        shared = max(self.shared.reserve(start + piece * target / SHARED_PIECES, share)
                     for piece in range(SHARED_PIECES))
        return max(own, shared)

    def sleep_until(self, moment: float) -> None:
        remaining = moment - self.clock()
        if remaining > 0:
            self.sleep(remaining)

    def settle(self, direction: Direction, began: float, size_bytes: int) -> None:
        """Called after a real transfer that began at ``began``: wait out the rest of its slot."""
        self.sleep_until(self.reserve(direction, began, size_bytes))


class ShapedChannel(Channel):
    """``inner`` with the transfer times of ``platform`` at ``memory_mb`` (see module doc)."""

    def __init__(self, inner: Channel, platform: PlatformProfile, memory_mb: float, *,
                 shaper: BandwidthShaper | None = None) -> None:
        self.inner = inner
        self.shaper = shaper or BandwidthShaper(platform, memory_mb)
        self.backoff = inner.backoff  # get() polls like the wrapped channel

    def put(self, key: str, data: bytes | bytearray) -> None:
        shaper = self.shaper
        done_at = shaper.reserve("up", shaper.clock(), len(data))
        visible_at = time.time() + (done_at - shaper.clock())
        # the time goes beside the value, not in front of it: a 100 MB frame is not copied
        self.inner.put(key + VISIBLE_SUFFIX, _VISIBLE.pack(_MAGIC, visible_at))
        self.inner.put(key, data)
        shaper.sleep_until(done_at)

    def put_if_absent(self, key: str, data: bytes | bytearray) -> bool:
        return self.inner.put_if_absent(key, data)  # tiny control objects: not shaped

    def try_get(self, key: str) -> bytes | None:
        began = self.shaper.clock()
        value = self.inner.try_get(key)
        if value is None:
            return None
        marker = self.inner.try_get(key + VISIBLE_SUFFIX)
        if marker is not None and marker[:4] == _MAGIC and len(marker) == _VISIBLE.size:
            _, visible_at = _VISIBLE.unpack_from(marker)
            wait = visible_at - time.time()
            visible = self.shaper.clock() + wait  # the upload's end, on the shaper's clock
            if wait > 0:  # still uploading: a real reader would not have it yet
                self.shaper.sleep(wait)
            # its download starts once the upload is over, also when that happened while
            # this read was under way (a slow read on a loaded machine saw it early)
            began = max(began, visible)
        self.shaper.settle("down", began, len(value))
        return value

    def delete(self, keys: Iterable[str]) -> None:
        listed = list(keys)
        self.inner.delete([*listed, *(key + VISIBLE_SUFFIX for key in listed)])

    def delete_prefix(self, prefix: str) -> int:
        return self.inner.delete_prefix(prefix)  # the markers share their values' prefix

    def list_keys(self, prefix: str) -> list[str]:
        return self.inner.list_keys(prefix)  # markers too: delete() takes them as keys

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return (f"ShapedChannel({self.inner!r}, {self.shaper.platform.name}, "
                f"{self.shaper.memory_mb:g} MB)")
