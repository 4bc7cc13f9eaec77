"""Fencing: only the live epoch's workers train, and only one invocation per worker.

The trigger issues a run-wide **epoch** for every segment and every retry of one, strictly
increasing, and records it in ``{run}/fence.json`` before the workers start. All a segment
writes is namespaced by its epoch (fasdl.contract.keys), so nothing of a dead attempt is ever read.
Two things remain that namespaces alone do not stop, and this module does:

* a **zombie**: a worker of an epoch Step Functions gave up on keeps running (Lambda does not
  stop an invocation when its Map fails or its task times out). :class:`Fence` reads the
  fence at the segment's start, every ``check_every_s`` during training and always before the
  checkpoint is written or committed; a worker whose epoch is no longer the run's stops with
  :class:`WorkerFenced` and writes nothing more;
* a **duplicate**: a Task retry after an ambiguous Invoke error can start a worker twice in
  one epoch. Each invocation creates its claim ``{run}/{epoch}/claim/{worker}`` with a
  conditional write before it writes anything; the second finds the first's claim and stops
  with :class:`WorkerDuplicate` (the segment is then retried under a new epoch).

Stdlib only: the trigger imports it without numpy or torch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from fasdl.contract.errors import WorkerDuplicate, WorkerFenced
from fasdl.contract.fields import is_int_at_least
from fasdl.contract.keys import claim_key, fence_key

if TYPE_CHECKING:
    from fasdl.exchange.channel.base import Channel

FENCE_FORMAT = 1


class FenceError(RuntimeError):
    """The run's fence object is missing or malformed."""


def read_epoch(store: Channel, run_id: str) -> int | None:
    """The run's current epoch, or None before the trigger issued the first."""
    data = store.try_get(fence_key(run_id))
    if data is None:
        return None
    try:
        fence = json.loads(data)
        epoch = fence["epoch"]
    except (ValueError, KeyError, TypeError) as error:
        raise FenceError(f"fence of run {run_id!r} is malformed: {error!r}") from None
    if not is_int_at_least(epoch, 1):
        raise FenceError(f"fence of run {run_id!r}: epoch must be an integer >= 1, "
                         f"got {epoch!r}")
    return epoch


def issue_epoch(store: Channel, run_id: str) -> int:
    """The trigger's next epoch for ``run_id``, recorded before any worker of it starts.

    The state machine runs one trigger action of a run at a time, so read-then-write is safe.
    """
    epoch = (read_epoch(store, run_id) or 0) + 1
    store.put(fence_key(run_id), json.dumps({"format": FENCE_FORMAT, "epoch": epoch,
                                             "issued_at": time.time()}).encode())
    return epoch


class Fence:
    """A worker's view of the fence: :meth:`check` raises once its epoch is superseded."""

    def __init__(self, store: Channel, run_id: str, epoch: int, *, check_every_s: float,
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
        if current != self.epoch:
            raise WorkerFenced(f"run {self.run_id!r} is at epoch {current}, this worker's is "
                               f"{self.epoch}: a newer attempt owns the run; stopping without "
                               f"writing anything more")


def claim_worker(exchange: Channel, run_id: str, epoch: int, worker: int, token: str) -> None:
    """Claim ``worker`` in ``epoch`` for this invocation (``token``: its request id)."""
    key = claim_key(run_id, epoch, worker)
    if not exchange.claim(key, token.encode()):
        raise WorkerDuplicate(f"worker {worker} of run {run_id!r} already runs in epoch "
                              f"{epoch} (claim {key!r} is another invocation's); a retried "
                              f"invoke started it twice, so this copy stops")
