"""Fencing: only the live epoch's workers train, and only one invocation per worker.

The trigger issues a run-wide **epoch** for every segment and every retry of one, strictly
increasing, and records it in ``{run}/fence.json`` before the workers start. All a segment
writes is namespaced by its epoch (fasdl.contract.keys), so nothing of a dead attempt is ever read.

The fence only moves forward: an epoch is issued by a conditional write (S3 ``If-Match`` on the
ETag read, ``If-None-Match: *`` for the first), so a trigger action whose write stalled past a
retry of it, and lands after later epochs were issued, fails with :class:`FenceConflict`
instead of setting the fence back. Each issue carries a random token, so a write whose reply
was lost and that botocore retried (412 for the retry) is still recognised as its own.
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
from fasdl.contract.keys import claim_key, exchange_prefix, fence_key

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


def issue_epoch(store: FenceStore, run_id: str,
                after_read: Callable[[], None] | None = None) -> int:
    """The trigger's next epoch for ``run_id``, recorded before any worker of it starts: one
    above the fence it read, written only if the fence is still what it read. ``after_read``
    runs between the first read and its write (fault tests: fasdl.run.fault_hooks)."""
    key = fence_key(run_id)
    token = secrets.token_hex(8)
    for _ in range(ISSUE_ATTEMPTS):
        found = store.get_versioned(key)
        if after_read is not None:
            after_read()
            after_read = None
        seen = None if found is None else _parse(run_id, found[0])
        epoch = 1 if seen is None else seen[0] + 1
        body = json.dumps({"format": FENCE_FORMAT, "epoch": epoch, "token": token,
                           "issued_at": time.time()}).encode()
        written = (store.put_if_absent(key, body) if found is None
                   else store.put_if_match(key, body, found[1]))
        if written:
            return epoch
        now = store.try_get(key)
        current = None if now is None else _parse(run_id, now)
        if current is not None and current[1] == token:
            return current[0]  # our write landed; its reply was lost and the retry refused
        if current != seen:
            raise FenceConflict(
                f"run {run_id!r}: this trigger action read epoch {seen and seen[0]} but the "
                f"fence is now at {current and current[0]}: another action issued an epoch "
                "since, so this one's run state is stale and it stops without issuing one")
    raise FenceConflict(f"run {run_id!r}: the fence kept conflicting with concurrent writes "
                        f"after {ISSUE_ATTEMPTS} attempts")


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


def clean_dead_epochs(exchange: Channel, run_id: str, resume_epoch: int, epoch: int) -> int:
    """Delete the exchange keys of the epochs the live one supersedes: ``[resume_epoch,
    epoch)``, the finished segment's leftovers (its last two merged models) and every failed
    attempt since. Epochs below ``resume_epoch`` were cleaned the same way when it started
    (the first segment's range starts at 1), so each live epoch leaves nothing dead behind;
    the run's last epoch is finalize's to clean. Returns the number of keys deleted."""
    return sum(exchange.delete_prefix(exchange_prefix(run_id, dead))
               for dead in range(max(1, resume_epoch), epoch))


def start_dead_epoch_cleanup(exchange: Channel, run_id: str, resume_epoch: int,
                             epoch: int) -> threading.Thread:
    """:func:`clean_dead_epochs` beside the segment's training (worker 0 runs it: inside the
    VPC, unlike the trigger, it reaches Valkey); a failure is logged, never raised, since a
    leftover only costs storage until its TTL."""
    def clean() -> None:
        try:
            deleted = clean_dead_epochs(exchange, run_id, resume_epoch, epoch)
        except Exception:
            _log.exception("dead epoch cleanup failed (run %s, epochs %s-%s)", run_id,
                           resume_epoch, epoch - 1)
        else:
            _log.info("dead epochs cleaned (run %s, epochs %s-%s): %d keys", run_id,
                      resume_epoch, epoch - 1, deleted)

    thread = threading.Thread(target=clean, name="fasdl-dead-epochs", daemon=True)
    thread.start()
    return thread


_log = logging.getLogger(__name__)
