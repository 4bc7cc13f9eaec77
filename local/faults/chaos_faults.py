"""Storage faults of ``python -m local run`` for chaos trials (bench/chaos.py), next to
local/faults/injection.py's:

* ``--restart-s3-at N`` restarts the SeaweedFS server once the run's exchange holds a frame of
  iteration N or later (S3 plans: its exchange bucket; Valkey plans: the cache). Its data
  directory is kept, so objects survive; every client (workers, trigger, finalize) meets a
  few seconds of refused connections and must ride them out;
* ``--plant-stale-frame N`` writes valid-looking frames at the merged shard 0 keys of
  iterations N, N+1, N+2 (or just ahead of the workers, if they are past N) in the
  **live** epoch (``runs/<run>/fence.json``), framed under the identity of an older epoch
  with other values: a zombie's frame where a live reader looks. The reader must reject it;
* ``--truncate-frame N``: the same keys get the live epoch's own frame cut in half, as a
  torn write the reader may see before the complete one.

The faults run in the runner's poll (every 0.5 s), before the real writer reaches the key,
and print what they did. A failing poll (an outage) is reported and retried at the next one.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fasdl.contract.keys import merged_key
from fasdl.exchange.wire import HEADER_SIZE, encode_shard, read_header, reframe
from local.servers.layout import LAYOUT
from local.servers.managed import RedisTlsClusterServer, SeaweedS3Server, ValkeyServer

EXCHANGE_BUCKET, RESULTS_BUCKET = LAYOUT.exchange_bucket, LAYOUT.results_bucket
PREFIX = LAYOUT.exchange_prefix
AHEAD = 3  # iterations between the workers' latest frame and the first planted one
PLANTED = 3  # frames planted, at consecutive iterations: a reader must meet one before its
# writer replaces it (with hap, workers load merged l−1 while the aggregator may still be on it)
_FRAME_ITERATION = re.compile(r"/it/(\d{8})/")
_FRAME_KEY = re.compile(r"^(\d+)/it/(\d{8})/(?:shard|merged)/000(?:/|$)")
Say = Callable[[str], None]
Cache = ValkeyServer | RedisTlsClusterServer


@dataclass(frozen=True)
class StorageFaults:
    """The storage faults of one run (None: not injected)."""

    restart_s3_at: int | None = None
    plant_stale_frame_at: int | None = None
    truncate_frame_at: int | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.restart_s3_at, self.plant_stale_frame_at,
                                           self.truncate_frame_at))


class _Exchange:
    """The run's exchange keys (without the ``exchange/`` prefix) on either channel."""

    def __init__(self, s3_client: Any, cache: Cache | None) -> None:
        self.s3 = s3_client
        self.cache = cache
        self._valkey: Any = None

    def _client(self) -> Any:
        if self.cache is not None and self._valkey is None:
            self._valkey = self.cache.client()
        return self._valkey

    def reset(self) -> None:
        """Drop the Valkey connection (after an error or a restart)."""
        if self._valkey is not None:
            self._valkey.close()
        self._valkey = None

    def keys(self, run_id: str) -> list[str]:
        prefix = LAYOUT.exchange_run_prefix(run_id)
        if self.cache is not None:
            found = self._client().scan_iter(match=f"{prefix}*", count=1000)
            names = [k.decode() if isinstance(k, bytes) else str(k) for k in found]
        else:
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=EXCHANGE_BUCKET, Prefix=prefix)
            names = [o["Key"] for page in pages for o in page.get("Contents", [])]
        return [name.removeprefix(prefix) for name in names]

    def get(self, key: str) -> bytes | None:
        if self.cache is not None:
            data = self._client().get(PREFIX + key)
            return None if data is None else bytes(data)
        try:
            body = self.s3.get_object(Bucket=EXCHANGE_BUCKET, Key=PREFIX + key)["Body"]
        except self.s3.exceptions.NoSuchKey:
            return None
        return bytes(body.read())

    def put(self, key: str, data: bytes) -> None:
        if self.cache is not None:
            self._client().set(PREFIX + key, data, ex=3600)
        else:
            self.s3.put_object(Bucket=EXCHANGE_BUCKET, Key=PREFIX + key, Body=data)


def live_epoch(s3_client: Any, run_id: str) -> int | None:
    """The run's current epoch, as the trigger recorded it (None before the first)."""
    try:
        body = s3_client.get_object(Bucket=RESULTS_BUCKET, Key=LAYOUT.fence_object_key(run_id))
    except s3_client.exceptions.NoSuchKey:
        return None
    epoch = json.loads(body["Body"].read())["epoch"]
    return int(epoch)


def latest_frame(exchange: _Exchange, run_id: str, epoch: int) -> tuple[int, str] | None:
    """The highest iteration with a frame of shard 0 in ``epoch``, and that frame's key."""
    best: tuple[int, str] | None = None
    for key in exchange.keys(run_id):
        found = _FRAME_KEY.match(key)
        if found and int(found.group(1)) == epoch and "/claim/" not in key:
            iteration = int(found.group(2))
            if best is None or iteration > best[0]:
                best = (iteration, f"{run_id}/{key}")
    return best


def bad_frame(run_id: str, epoch: int, iteration: int, count: int, *, stale: bool) -> bytes:
    """Shard 0's merged frame of ``iteration``: under an older epoch's identity with other
    values (``stale``), or the live identity cut in half (torn)."""
    frame = encode_shard(np.zeros(count, dtype=np.float32), run=f"{run_id}/{epoch}",
                         iteration=iteration, worker=0, shard=0)
    if stale:
        return reframe(frame, np.full(count, 0.5, dtype=np.float32), run=f"{run_id}/{epoch - 1}")
    return frame[:HEADER_SIZE + (len(frame) - HEADER_SIZE) // 2]


def _planting(exchange: _Exchange, s3_client: Any, run_id: str, at: int, *, stale: bool,
              say: Say) -> Callable[[], bool]:
    """One attempt to plant the frame; True once it is planted."""
    what = "a stale frame (older epoch's identity)" if stale else "a truncated frame"

    def attempt() -> bool:
        epoch = live_epoch(s3_client, run_id)
        seen = None if epoch is None else latest_frame(exchange, run_id, epoch)
        if epoch is None or seen is None or seen[0] < at - AHEAD:
            return False
        data = exchange.get(seen[1])
        if data is None:
            return False  # consumed and deleted meanwhile: the next poll finds another
        first = max(at, seen[0] + AHEAD)
        for iteration in range(first, first + PLANTED):
            exchange.put(merged_key(run_id, epoch, iteration, 0),
                         bad_frame(run_id, epoch, iteration, read_header(data).count,
                                   stale=stale))
        say(f"planted {what} at {merged_key(run_id, epoch, first, 0)} and the next "
            f"{PLANTED - 1} iterations' (the workers were at iteration {seen[0]})")
        return True

    return attempt


def _restart_s3(exchange: _Exchange, s3: SeaweedS3Server, run_id: str, at: int,
                say: Say) -> Callable[[], bool]:
    def attempt() -> bool:
        frames = [_FRAME_ITERATION.search(key) for key in exchange.keys(run_id)]
        if not any(f is not None and int(f.group(1)) >= at for f in frames):
            return False
        exchange.reset()
        began = time.monotonic()
        s3.restart()  # same ports and data dir: objects survive, connections are refused
        say(f"restarted {s3.name} at iteration {at} in {time.monotonic() - began:.1f} s")
        return True

    return attempt



def with_storage_faults(on_poll: Callable[[], None], faults: StorageFaults, *, run_id: str,
                        s3: SeaweedS3Server, s3_client: Any, cache: Cache | None,
                        say: Say) -> Callable[[], None]:
    """``on_poll`` that also injects ``faults``, each once."""
    if not faults:
        return on_poll
    exchange = _Exchange(s3_client, cache)
    pending: list[Callable[[], bool]] = []
    if faults.plant_stale_frame_at is not None:
        pending.append(_planting(exchange, s3_client, run_id, faults.plant_stale_frame_at,
                                 stale=True, say=say))
    if faults.truncate_frame_at is not None:
        pending.append(_planting(exchange, s3_client, run_id, faults.truncate_frame_at,
                                 stale=False, say=say))
    if faults.restart_s3_at is not None:
        pending.append(_restart_s3(exchange, s3, run_id, faults.restart_s3_at, say))

    def poll() -> None:
        on_poll()
        for attempt in list(pending):
            try:
                done = attempt()
            except Exception as error:  # an outage (a restart under way): next poll
                exchange.reset()
                say(f"storage fault: will retry after {type(error).__name__}: {error}")
                continue
            if done:
                pending.remove(attempt)

    return poll
