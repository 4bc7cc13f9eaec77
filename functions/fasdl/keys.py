"""Deterministic object keys, shared by both channels and the checkpoint bucket.

Exchange keys live under ``{run}/{attempt}/`` so a retried attempt never reads a stale
object of a failed one; readers GET these exact keys (no LIST in the hot path). Checkpoint
keys live under ``{run}/checkpoint/it/{resume_iteration}/``: the checkpoint a segment that
starts at that iteration resumes from (the contract's ``segment.start_iteration``). Its
objects are namespaced by the attempt that wrote them; the manifest is not, and names the
objects by full key.
"""

from __future__ import annotations

import re

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_OBJECT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,127}$")


class KeyFormatError(ValueError):
    """A key component is outside its allowed range or alphabet."""


def _check_run(run: str) -> str:
    if not _RUN_ID.match(run):
        raise KeyFormatError(f"run id must be 1-128 letters, digits, '_', '.', '-', got {run!r}")
    return run


def _check_index(name: str, value: int, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise KeyFormatError(f"{name} must be an integer in [0, {limit}), got {value!r}")
    return value


def exchange_prefix(run: str, attempt: int) -> str:
    """Everything one attempt of a run puts on the exchange channel."""
    return f"{_check_run(run)}/{_check_index('attempt', attempt, 10**6)}/"


def iteration_prefix(run: str, attempt: int, iteration: int) -> str:
    return f"{exchange_prefix(run, attempt)}it/{_check_index('iteration', iteration, 10**8):08d}/"


def shard_key(run: str, attempt: int, iteration: int, shard: int, worker: int) -> str:
    """Shard ``shard`` of worker ``worker``'s locally updated parameters at ``iteration``."""
    return (f"{iteration_prefix(run, attempt, iteration)}"
            f"shard/{_check_index('shard', shard, 1000):03d}/"
            f"from/{_check_index('worker', worker, 10000):04d}")


def merged_key(run: str, attempt: int, iteration: int, shard: int) -> str:
    """Aggregator ``shard``'s batch-weighted average of shard ``shard`` at ``iteration``."""
    return (f"{iteration_prefix(run, attempt, iteration)}"
            f"merged/{_check_index('shard', shard, 1000):03d}")


def checkpoint_prefix(run: str, resume_iteration: int) -> str:
    """The checkpoint a segment starting at ``resume_iteration`` resumes from."""
    index = _check_index("resume_iteration", resume_iteration, 10**8)
    return f"{_check_run(run)}/checkpoint/it/{index:08d}/"


def _attempt_prefix(run: str, resume_iteration: int, attempt: int) -> str:
    # each attempt writes its own objects: a retry never mixes with a dead attempt's leftovers
    index = _check_index("attempt", attempt, 10**6)
    return f"{checkpoint_prefix(run, resume_iteration)}attempt/{index}/"


def checkpoint_object_key(run: str, resume_iteration: int, attempt: int, name: str) -> str:
    """One object of a checkpoint, e.g. ``model`` or ``worker/0003/momentum``."""
    if not _OBJECT_NAME.match(name) or ".." in name:
        raise KeyFormatError(
            f"checkpoint object name must be 1-128 of [A-Za-z0-9_.-/], got {name!r}")
    return f"{_attempt_prefix(run, resume_iteration, attempt)}objects/{name}"


def checkpoint_part_key(run: str, resume_iteration: int, attempt: int, worker: int) -> str:
    """A worker's list of the objects it wrote (with checksums), read by the committer."""
    index = _check_index("worker", worker, 10000)
    return f"{_attempt_prefix(run, resume_iteration, attempt)}parts/{index:04d}.json"


def manifest_key(run: str, resume_iteration: int) -> str:
    """Written last: a checkpoint exists exactly when its manifest does. One per resume
    iteration, whatever attempt wrote it, so a reader needs only the segment's start."""
    return f"{checkpoint_prefix(run, resume_iteration)}manifest.json"
