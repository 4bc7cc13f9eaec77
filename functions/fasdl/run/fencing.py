"""Fencing: only the live epoch's workers train, and only one invocation per worker.

The trigger issues a run-wide **epoch** for every segment and every retry of one, strictly
increasing, and records it in ``{run}/fence.json`` before the workers start. All a segment
writes is namespaced by its epoch (fasdl.contract.keys), so nothing of a dead attempt is ever read.

The fence only moves forward, one step per trigger call: a call issues ``e + 1`` only while
the fence is at the epoch ``e`` its run state holds, by a conditional write (S3 ``If-Match`` on
the ETag read, ``If-None-Match: *`` for the first). A call that comes late (stalled before or
after its read while Step Functions retried it, and the retry's segment started) finds either
its own issue, recorded with the call's token, and returns it without a write, or a later
epoch, and fails with :class:`FenceConflict`: it never fences the live segment's workers, nor
costs that segment a retry. A write whose reply was lost and that botocore retried (412 for the
retry) is recognised as its own the same way.
Two things remain that namespaces alone do not stop, and this module does:

* a **zombie**: a worker of an epoch Step Functions gave up on keeps running (Lambda does not
  stop an invocation when its Map fails or its task times out). :class:`Fence` reads the
  fence at the segment's start, every ``check_every_s`` during training and always before the
  checkpoint is written or committed; a worker whose epoch is no longer the run's stops with
  :class:`WorkerFenced` and writes nothing more; a fence *below* its epoch (or none) means the
  store went back, and it stops with :class:`FenceWentBack` (never train on such a store);
* a **duplicate**: a Task retry after an ambiguous Invoke error can start a worker twice in
  one epoch. Each invocation creates its claim ``{run}/{epoch}/claim/{worker}`` with a
  conditional write before it writes anything; the second finds the first's claim and stops
  with :class:`WorkerDuplicate` (the segment is then retried under a new epoch). The claim's
  token is the request id plus a random nonce of the claiming call, so even a copy with the
  same request id is refused.

Stdlib only: the trigger imports it without numpy or torch.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from fasdl.contract.errors import FenceConflict, FenceWentBack, WorkerDuplicate, WorkerFenced
from fasdl.contract.fields import is_int_at_least
from fasdl.contract.keys import (
    claim_key,
    exchange_epoch,
    exchange_prefix,
    fence_key,
    run_prefix,
)

if TYPE_CHECKING:
    from fasdl.exchange.channel.base import Channel

FENCE_FORMAT = 1
# Conditional writes that 409 ConditionalRequestConflict (a concurrent write on the key) are
# re-read and tried again this often before the action gives up
ISSUE_ATTEMPTS = 5


class FenceStore(Protocol):
    """What the fence needs of its store: the results bucket's S3 channel."""

    def get_versioned(self, key: str) -> tuple[bytes, str] | None: ...

    def put_if_match(self, key: str, data: bytes | bytearray, etag: str) -> bool: ...

    def put_if_absent(self, key: str, data: bytes | bytearray) -> bool: ...

    def try_get(self, key: str) -> bytes | None: ...


class EpochIssuer(Protocol):
    """:func:`issue_epoch` with its store bound (the trigger's)."""

    def __call__(self, run_id: str, *, supersedes: int | None, call: str) -> int: ...


class FenceError(RuntimeError):
    """The run's fence object is missing or malformed."""


def _parse(run_id: str, data: bytes) -> tuple[int, str]:
    """(epoch, token) of a fence object."""
    try:
        fence = json.loads(data)
        epoch, token = fence["epoch"], str(fence.get("token", ""))
    except (ValueError, KeyError, TypeError) as error:
        raise FenceError(f"fence of run {run_id!r} is malformed: {error!r}") from None
    if not is_int_at_least(epoch, 1):
        raise FenceError(f"fence of run {run_id!r}: epoch must be an integer >= 1, "
                         f"got {epoch!r}")
    return epoch, token


def read_epoch(store: FenceStore | Channel, run_id: str) -> int | None:
    """The run's current epoch, or None before the trigger issued the first."""
    data = store.try_get(fence_key(run_id))
    return None if data is None else _parse(run_id, data)[0]


def issue_epoch(store: FenceStore, run_id: str, *, supersedes: int | None, call: str,
                after_read: Callable[[], None] | None = None) -> int:
    """The trigger's next epoch for ``run_id``, recorded before any worker of it starts:
    ``supersedes + 1`` (1 for a fresh run, ``supersedes`` None), issued only while the fence is
    at ``supersedes``, the epoch the caller's run state holds. ``call`` names the trigger call
    (action, and the execution where two could race); with ``supersedes`` it is the issue's
    token, so a retry of the call, or its original arriving late, finds the epoch it issued
    and gets it back instead of issuing another: the live segment's workers stay unfenced.
    Any other fence raises :class:`FenceConflict` (Step Functions does not retry it).
    ``after_read`` runs between the first read and its write (fasdl.run.fault_hooks)."""
    key = fence_key(run_id)
    epoch = 1 if supersedes is None else supersedes + 1
    token = f"{call}:{supersedes}"
    for _ in range(ISSUE_ATTEMPTS):
        found = store.get_versioned(key)
        if after_read is not None:
            after_read()
            after_read = None
        seen = None if found is None else _parse(run_id, found[0])
        if seen is not None and seen == (epoch, token):
            return epoch  # this call's own issue: its retry, or itself arriving late
        if (None if seen is None else seen[0]) != supersedes:
            raise _conflict(run_id, supersedes, seen)
        body = json.dumps({"format": FENCE_FORMAT, "epoch": epoch, "token": token,
                           "issued_at": time.time()}).encode()
        written = (store.put_if_absent(key, body) if found is None
                   else store.put_if_match(key, body, found[1]))
        if written:
            return epoch
        # refused: a concurrent write, or our own whose reply was lost; read again
    raise FenceConflict(f"run {run_id!r}: the fence kept conflicting with concurrent writes "
                        f"after {ISSUE_ATTEMPTS} attempts")


def _conflict(run_id: str, supersedes: int | None, seen: tuple[int, str] | None
              ) -> FenceConflict:
    return FenceConflict(
        f"run {run_id!r}: this trigger call's run state is at epoch {supersedes} but the "
        f"fence is at {seen and seen[0]}: another call issued an epoch since, so this one "
        "is late or stale and stops without issuing one (the live segment goes on)")


class Fence:
    """A worker's view of the fence: :meth:`check` raises once its epoch is superseded."""

    def __init__(self, store: FenceStore | Channel, run_id: str, epoch: int, *,
                 check_every_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.run_id = run_id
        self.epoch = epoch
        self.check_every_s = check_every_s
        self.clock = clock
        self._checked_at: float | None = None

    def check(self, *, force: bool = False) -> None:
        """Read the fence if ``force`` or ``check_every_s`` passed since the last read."""
        now = self.clock()
        if not force and self._checked_at is not None and \
                now - self._checked_at < self.check_every_s:
            return
        current = read_epoch(self.store, self.run_id)
        self._checked_at = now
        if current is None or current < self.epoch:
            raise FenceWentBack(f"run {self.run_id!r}: the fence is at epoch {current}, below "
                                f"this worker's {self.epoch}: the results store lost writes, "
                                "so this worker stops rather than train on it")
        if current != self.epoch:
            raise WorkerFenced(f"run {self.run_id!r} is at epoch {current}, this worker's is "
                               f"{self.epoch}: a newer attempt owns the run; stopping without "
                               f"writing anything more")


def claim_worker(exchange: Channel, run_id: str, epoch: int, worker: int,
                 request_id: str) -> None:
    """Claim ``worker`` in ``epoch`` for this invocation: its request id and a nonce of this
    call, so only a retried create of this very claim finds its own token, never another
    invocation, whatever its request id."""
    key = claim_key(run_id, epoch, worker)
    if not exchange.claim(key, f"{request_id}:{secrets.token_hex(8)}".encode()):
        raise WorkerDuplicate(f"worker {worker} of run {run_id!r} already runs in epoch "
                              f"{epoch} (claim {key!r} is another invocation's); a retried "
                              f"invoke started it twice, so this copy stops")


def clean_dead_epochs(exchange: Channel, run_id: str, epoch: int) -> int:
    """Delete every exchange key of the run's epochs below the live ``epoch``, from one
    listing of the run's prefix: the finished segment's leftovers (its last two merged
    models), every failed attempt since, and what a zombie of any older epoch wrote after
    that epoch was cleaned (issue 41: a range from the resumed epoch missed those for good).
    The run's last epoch is finalize's to clean. Returns the number of keys deleted."""
    dead = [key for key in exchange.list_keys(run_prefix(run_id))
            if (found := exchange_epoch(run_id, key)) is not None and found < epoch]
    exchange.delete(dead)
    return len(dead)


def clean_own_dead_epoch(exchange: Channel, run_id: str, epoch: int) -> int:
    """A fenced worker's last act: its epoch is dead, so every key in it is garbage,
    whatever this worker wrote after the live epoch's worker 0 cleaned it included."""
    return exchange.delete_prefix(exchange_prefix(run_id, epoch))


def start_dead_epoch_cleanup(exchange: Channel, run_id: str, epoch: int) -> threading.Thread:
    """:func:`clean_dead_epochs` beside the segment's training (worker 0 runs it: inside the
    VPC, unlike the trigger, it reaches Valkey); a failure is logged, never raised, since a
    leftover only costs storage until its TTL."""
    def clean() -> None:
        try:
            deleted = clean_dead_epochs(exchange, run_id, epoch)
        except Exception:
            _log.exception("dead epoch cleanup failed (run %s, epochs below %s)", run_id,
                           epoch)
        else:
            _log.info("dead epochs cleaned (run %s, epochs below %s): %d keys", run_id,
                      epoch, deleted)

    thread = threading.Thread(target=clean, name="fasdl-dead-epochs", daemon=True)
    thread.start()
    return thread


_log = logging.getLogger(__name__)
