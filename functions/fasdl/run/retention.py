"""Keep a run's results short: the newest ``FASDL_KEEP_CHECKPOINTS`` checkpoints of its chain,
nothing of a dead attempt.

Every manifest names the checkpoint its segment resumed from (meta ``resumed_from``, written by
fasdl.run.segment_runner), so the chain is followed back from the checkpoint a segment just
committed. When a segment finishes, the trigger deletes every other checkpoint object of the
run up to that iteration: older checkpoints past the kept ones, and the objects, parts and
manifests of dead attempts (a failed or fenced epoch, a timed-out attempt's partial writes).
Nothing beyond that iteration is touched, so a trigger invocation that runs late (its Task was
retried and the run went on) cannot delete a newer checkpoint. The final model and the summary
live outside the checkpoints. Stdlib only: the trigger runs it.
"""

from __future__ import annotations

import json

from fasdl.contract.keys import checkpoint_group, checkpoints_prefix, manifest_key
from fasdl.exchange.channel.s3 import S3Channel

RESUMED_FROM = "resumed_from"  # manifest meta: "<iteration>:<epoch>" it resumed from


def resumed_from(start_iteration: int, resume_epoch: int) -> str:
    return f"{start_iteration}:{resume_epoch}"


def checkpoint_chain(store: S3Channel, run: str, iteration: int, epoch: int, keep: int
                     ) -> list[tuple[int, int]]:
    """The newest ``keep`` committed checkpoints of the chain ending at (iteration, epoch)."""
    chain: list[tuple[int, int]] = []
    current = (iteration, epoch)
    while current[1] >= 1 and len(chain) < keep:
        data = store.try_get(manifest_key(run, *current))
        if data is None:
            break
        chain.append(current)
        parent = str(json.loads(data).get("meta", {}).get(RESUMED_FROM, ""))
        if ":" not in parent:
            break
        before, _, parent_epoch = parent.partition(":")
        current = (int(before), int(parent_epoch))
    return chain


def prune_checkpoints(store: S3Channel, run: str, iteration: int, epoch: int, keep: int) -> int:
    """Delete the run's checkpoint objects up to ``iteration`` that are not among the kept;
    returns how many. Nothing is deleted unless (iteration, epoch) itself is committed."""
    kept = set(checkpoint_chain(store, run, iteration, epoch, keep))
    if (iteration, epoch) not in kept:
        return 0
    doomed = [key for key in store.list_keys(checkpoints_prefix(run))
              if (group := checkpoint_group(key)) is not None and group not in kept
              and group[0] <= iteration]
    store.delete(doomed)
    return len(doomed)
