"""Deterministic object keys, shared by both channels and the checkpoint bucket.

Everything a segment's workers write is namespaced by its **epoch**: a run-wide number the
trigger issues, strictly increasing, for every segment and every retry of one
(fasdl.run.fencing). A later segment or retry therefore never reads an object a dead attempt
left behind, and frames carry the epoch in their checked header too (fasdl.exchange.kreduce).

* exchange: ``{run}/{epoch}/it/{iteration}/...``, read by exact key (no LIST in the hot
  path), and ``{run}/{epoch}/claim/{worker}``: one invocation per worker and epoch. With
  P = ``training.exchange_key_prefixes`` > 1 every exchange key starts with a hashed label
  ``{h}/`` (``h`` = two hex digits, a hash of the rest of the key mod P), so the keys of an
  iteration spread evenly over P prefixes: S3 serves at least 3,500 PUT/COPY/POST/DELETE and
  5,500 GET/HEAD requests per second per partitioned prefix and scales by spreading requests
  over prefixes ("Best practices design patterns: optimizing Amazon S3 performance",
  https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html). The
  label sits right after the channel's own prefix (``exchange/``), which the bucket's
  lifecycle rule filters on. P = 1 keeps the unlabelled keys;
* checkpoint (results bucket): ``{run}/checkpoint/it/{resume_iteration}/epoch/{epoch}/``
  holds the objects, part records and manifest of the checkpoint a segment starting at
  ``resume_iteration`` resumes from. The manifest is created once (conditional write) and
  the run state names the epoch whose checkpoint the next segment restores
  (``segment.resume_epoch``), so a late writer can neither replace it nor be picked up;
* ``{run}/fence.json`` (results bucket): the run's current epoch, written by the trigger.
"""

from __future__ import annotations

import hashlib
import re

from fasdl.contract.fields import is_int_in

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_OBJECT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,127}$")


class KeyFormatError(ValueError):
    """A key component is outside its allowed range or alphabet."""


def results_key(runs_prefix: str, key: str) -> str:
    """A run's key of this module (``{run}/...``) in the results bucket: under the stack's
    runs prefix (``FASDL_RUNS_PREFIX``, fasdl.contract.settings). The one place that prefix is
    added; ``Settings.results_key`` passes its own."""
    return f"{runs_prefix}{key}"


def _check_run(run: str) -> str:
    if not _RUN_ID.fullmatch(run):
        raise KeyFormatError(f"run id must be 1-128 letters, digits, '_', '.', '-', got {run!r}")
    return run


def _check_index(name: str, value: int, limit: int) -> int:
    if not is_int_in(value, 0, limit - 1):
        raise KeyFormatError(f"{name} must be an integer in [0, {limit}), got {value!r}")
    return value


EPOCH_LIMIT = 10**9


# the most hashed prefixes a plan may spread its exchange keys over: two hex digits
MAX_EXCHANGE_KEY_PREFIXES = 256


def _check_prefixes(prefixes: int) -> int:
    if not is_int_in(prefixes, 1, MAX_EXCHANGE_KEY_PREFIXES):
        raise KeyFormatError(f"exchange_key_prefixes must be an integer in "
                             f"[1, {MAX_EXCHANGE_KEY_PREFIXES}], got {prefixes!r}")
    return prefixes


def exchange_labels(prefixes: int) -> list[str]:
    """The hashed labels exchange keys start with at ``prefixes`` P: ``00/`` .. (P−1 in hex),
    or only the empty label when P is 1 (module docstring)."""
    if _check_prefixes(prefixes) == 1:
        return [""]
    return [_label(index) for index in range(prefixes)]


def _label(index: int) -> str:
    return f"{index:02x}/"


def spread_key(key: str, prefixes: int) -> str:
    """An exchange key under its hashed label: BLAKE2b of the key mod P (not hash(), which
    differs between processes); the key itself when P is 1."""
    if _check_prefixes(prefixes) == 1:
        return key
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return _label(int.from_bytes(digest, "big") % prefixes) + key


def exchange_prefix(run: str, epoch: int) -> str:
    """Everything the workers of one epoch of a run put on the exchange channel."""
    return f"{run_prefix(run)}{_check_index('epoch', epoch, EPOCH_LIMIT)}/"


def exchange_epoch(run: str, key: str) -> int | None:
    """The epoch of ``key`` if it is one of ``run``'s exchange keys (:func:`exchange_prefix`),
    else None."""
    prefix = run_prefix(run)
    if not key.startswith(prefix):
        return None
    text, slash, _ = key[len(prefix):].partition("/")
    return int(text) if slash and text.isdigit() else None


def claim_key(run: str, epoch: int, worker: int) -> str:
    """Created by the one invocation of ``worker`` that may train in ``epoch``."""
    return f"{exchange_prefix(run, epoch)}claim/{_check_index('worker', worker, 10000):04d}"


# ---- the results bucket, under the runs prefix (Settings adds it) ---------------------------
def run_prefix(run: str) -> str:
    """Everything of one run, in the results bucket and on the exchange."""
    return f"{_check_run(run)}/"


def fence_key(run: str) -> str:
    """The run's current epoch."""
    return f"{run_prefix(run)}fence.json"


def plan_key(run: str) -> str:
    """The plan the trigger validated for the run (the run state's ``plan_key``)."""
    return f"{run_prefix(run)}plan.json"


def adapted_plans_prefix(run: str) -> str:
    """The plans an adaptive run changed to."""
    return f"{run_prefix(run)}plans/"


def adapted_plan_key(run: str, segment: int) -> str:
    """The plan an adaptive run changed to, from segment ``segment`` on (written once)."""
    return f"{adapted_plans_prefix(run)}{_check_index('segment', segment, 10**5):05d}.json"


def is_adapted_plan_key(run: str, key: str) -> bool:
    """Whether ``key`` (without the runs prefix) is one of :func:`adapted_plan_key`'s."""
    name = key.removeprefix(adapted_plans_prefix(run))
    return key.startswith(adapted_plans_prefix(run)) and re.fullmatch(r"\d{5}\.json",
                                                                       name) is not None


def adaptations_prefix(run: str) -> str:
    """An adaptive run's decisions, one per segment boundary."""
    return f"{run_prefix(run)}adaptations/"


def adaptation_key(run: str, segment: int) -> str:
    """An adaptive run's decision at the boundary before ``segment`` (written once)."""
    return f"{adaptations_prefix(run)}{_check_index('segment', segment, 10**5):05d}.json"


def segments_prefix(run: str) -> str:
    """The workers' segment results."""
    return f"{run_prefix(run)}segments/"


def segment_result_key(run: str, index: int, attempt: int, worker: int) -> str:
    """One worker's result of one attempt of a segment."""
    return (f"{segments_prefix(run)}{_check_index('segment', index, 10**5):05d}/"
            f"attempt-{_check_index('attempt', attempt, 10**6)}/"
            f"worker-{_check_index('worker', worker, 10000):04d}.json")


def partitions_key(run: str) -> str:
    """Each worker's row range of the training set, written by the trigger."""
    return f"{run_prefix(run)}partitions.json"


def summary_key(run: str) -> str:
    return f"{run_prefix(run)}summary.json"


def failure_key(run: str) -> str:
    return f"{run_prefix(run)}failure.json"


# model.npy: the merged flat parameter vector; model.safetensors: the module's complete
# state_dict(); model.json: how to rebuild the module (fasdl.training.export)
FINAL_NAMES = ("model.npy", "model.safetensors", "model.json")
# the objects of a run's last checkpoint (worker 0's) that finalize publishes as these
EXPORT_OBJECTS = {"model.safetensors": "export/model.safetensors",
                  "model.json": "export/model.json"}


def final_key(run: str, name: str) -> str:
    """One of a finished run's outputs (:data:`FINAL_NAMES`)."""
    if name not in FINAL_NAMES:
        raise KeyFormatError(f"final output must be one of {', '.join(FINAL_NAMES)}, "
                             f"got {name!r}")
    return f"{run_prefix(run)}{name}"


def iteration_prefix(run: str, epoch: int, iteration: int) -> str:
    return f"{exchange_prefix(run, epoch)}it/{_check_index('iteration', iteration, 10**8):08d}/"


CHUNK_LIMIT = 10000


def _chunk_suffix(chunk: int | None) -> str:
    """A whole shard has none; chunk c of a pipelined exchange (fasdl.exchange.pipeline)
    ``/chunk/c``."""
    return "" if chunk is None else f"/chunk/{_check_index('chunk', chunk, CHUNK_LIMIT):04d}"


def shard_key(run: str, epoch: int, iteration: int, shard: int, worker: int,
              chunk: int | None = None) -> str:
    """Shard ``shard`` of worker ``worker``'s locally updated parameters at ``iteration``."""
    return (f"{iteration_prefix(run, epoch, iteration)}"
            f"shard/{_check_index('shard', shard, 1000):03d}/"
            f"from/{_check_index('worker', worker, 10000):04d}{_chunk_suffix(chunk)}")


def merged_key(run: str, epoch: int, iteration: int, shard: int,
               chunk: int | None = None) -> str:
    """Aggregator ``shard``'s batch-weighted average of shard ``shard`` at ``iteration``."""
    return (f"{iteration_prefix(run, epoch, iteration)}"
            f"merged/{_check_index('shard', shard, 1000):03d}{_chunk_suffix(chunk)}")


def checkpoints_prefix(run: str) -> str:
    """Every checkpoint of a run, committed or not."""
    return f"{run_prefix(run)}checkpoint/it/"


def checkpoint_prefix(run: str, resume_iteration: int) -> str:
    """The checkpoint a segment starting at ``resume_iteration`` resumes from."""
    index = _check_index("resume_iteration", resume_iteration, 10**8)
    return f"{checkpoints_prefix(run)}{index:08d}/"


_CHECKPOINT_GROUP = re.compile(r"checkpoint/it/(\d{8})/epoch/(\d+)/")


def checkpoint_group(key: str) -> tuple[int, int] | None:
    """(resume iteration, epoch) of a key under :func:`checkpoints_prefix`, else None."""
    match = _CHECKPOINT_GROUP.search(key)
    return None if match is None else (int(match[1]), int(match[2]))


def _epoch_prefix(run: str, resume_iteration: int, epoch: int) -> str:
    index = _check_index("epoch", epoch, EPOCH_LIMIT)
    return f"{checkpoint_prefix(run, resume_iteration)}epoch/{index}/"


def checkpoint_object_key(run: str, resume_iteration: int, epoch: int, name: str) -> str:
    """One object of a checkpoint, e.g. ``model`` or ``worker/0003/momentum``."""
    if not _OBJECT_NAME.fullmatch(name) or ".." in name:
        raise KeyFormatError(
            f"checkpoint object name must be 1-128 of [A-Za-z0-9_.-/], got {name!r}")
    return f"{_epoch_prefix(run, resume_iteration, epoch)}objects/{name}"


def checkpoint_part_key(run: str, resume_iteration: int, epoch: int, worker: int) -> str:
    """A worker's list of the objects it wrote (with checksums), read by the committer."""
    index = _check_index("worker", worker, 10000)
    return f"{_epoch_prefix(run, resume_iteration, epoch)}parts/{index:04d}.json"


def manifest_key(run: str, resume_iteration: int, epoch: int) -> str:
    """Created last, once: the checkpoint exists exactly when its manifest does."""
    return f"{_epoch_prefix(run, resume_iteration, epoch)}manifest.json"


# ---- the profiler's samples (results bucket, under the profiles prefix) -----------------------
def profile_memory_key(prefix: str, profile_id: str, memory_mb: float) -> str:
    """One memory size's samples of a profile."""
    return f"{prefix}{profile_id}/memory-{memory_mb:g}.jsonl"


def profile_transfer_prefix(profile_id: str, memory_mb: float) -> str:
    """The profiler's transfer objects on the exchange channel (under its own prefix)."""
    return f"profiling/{profile_id}/{memory_mb:g}/"


def profile_samples_key(prefix: str, profile_id: str) -> str:
    """All of a profile's samples, collected."""
    return f"{prefix}{profile_id}/samples.jsonl"


# ---- the datasets bucket --------------------------------------------------------------------
DATASET_ARRAYS = ("x", "y")
TEST_SPLIT = "test"


def dataset_array_key(dataset: str, name: str, *, test: bool = False) -> str:
    """``<dataset>/x.npy`` and ``y.npy`` (training rows), ``<dataset>/test/x.npy`` and ``y.npy``
    (the held-out split), as the importers lay them out (fasdl.datasets)."""
    if name not in DATASET_ARRAYS:
        raise KeyFormatError(f"dataset array must be one of {', '.join(DATASET_ARRAYS)}, "
                             f"got {name!r}")
    return f"{dataset}/{TEST_SPLIT}/{name}.npy" if test else f"{dataset}/{name}.npy"
