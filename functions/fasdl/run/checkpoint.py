"""Segment checkpoints: objects first, the manifest (with sha256 checksums) last.

A segment ends with every worker writing its objects and then a small part record listing
them with checksums; one committer (worker 0) waits for all W part records and writes the
manifest. A checkpoint exists exactly when its manifest does, so a crash mid-write leaves
the previous segment's manifest as the restart point. Checkpoints are keyed by the iteration
they resume at (the next segment's ``start_iteration``) and namespaced by the epoch that wrote
them (fasdl.contract.keys), manifest included: a committer never picks up a part left by a dead
attempt, and the manifest is created with a conditional write, so nothing replaces it. Loading
checks every object's size and sha256 against the manifest and raises
:class:`CheckpointError` on any mismatch.

Contents (arrays as .npy bytes, state as JSON — never pickle):

* ``model``: the merged model of the segment's last iteration (worker 0, an aggregator);
  a HAP non-aggregator loads it in its next step, as it would have fetched it;
* ``worker/{i}/params`` only for a HAP non-aggregator: merged(l−1) plus its own step of l
  (fasdl.exchange.kreduce), its own parameters;
* ``worker/{i}/<optimizer state>`` (fasdl.training.optimizers: ``momentum`` for sgd, ``exp_avg`` and
  ``exp_avg_sq`` for adamw), ``worker/{i}/exchange_*`` with bfloat16 uploads
  (fasdl.exchange.codec: the last merged model, the rounding residual, an aggregator's
  previous merged shard), ``worker/{i}/buffers`` (batch-norm statistics, .npz),
  ``worker/{i}/torch_rng`` and ``worker/{i}/state.json`` (data cursor, numpy RNG state);
* ``export/model.safetensors`` and ``export/model.json`` in the run's last checkpoint only:
  worker 0's complete state dict and its description (fasdl.training.export), which finalize
  publishes as ``model.safetensors`` and ``model.json``.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from fasdl.contract.keys import checkpoint_object_key, checkpoint_part_key, manifest_key
from fasdl.exchange.channel.base import Channel
from fasdl.exchange.kreduce import KReduceWorker
from fasdl.training.data import DataCursor

CHECKPOINT_FORMAT = 1
# An object's bytes, or a function that makes them when it is their turn to be written: a
# worker's checkpoint share is a few model-sized arrays, and holding them all at once pushed
# worker 0 past its memory size at the end of a segment.
ObjectBytes = bytes
ObjectSource = ObjectBytes | Callable[[], ObjectBytes]


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or does not match its manifest."""


@dataclass(frozen=True)
class ObjectRecord:
    key: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Manifest:
    run: str
    resume_iteration: int  # the first iteration trained after restoring this checkpoint
    epoch: int  # of the segment that wrote it (fasdl.run.fencing)
    workers: int
    objects: dict[str, ObjectRecord]
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def last_iteration(self) -> int:
        return self.resume_iteration - 1

    def to_json(self) -> str:
        return json.dumps({
            "format": CHECKPOINT_FORMAT, "run": self.run,
            "resume_iteration": self.resume_iteration, "epoch": self.epoch,
            "workers": self.workers,
            "objects": {name: {"key": r.key, "sha256": r.sha256, "size": r.size}
                        for name, r in sorted(self.objects.items())},
            "meta": self.meta,
        }, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: bytes | str, *, run: str, resume_iteration: int) -> Manifest:
        try:
            data = json.loads(text)
            if data["format"] != CHECKPOINT_FORMAT:
                raise CheckpointError(f"manifest format {data['format']!r}, "
                                      f"expected {CHECKPOINT_FORMAT}")
            manifest = cls(run=str(data["run"]), resume_iteration=int(data["resume_iteration"]),
                           epoch=int(data["epoch"]), workers=int(data["workers"]),
                           objects=_records(data["objects"]),
                           meta={str(k): str(v) for k, v in data.get("meta", {}).items()})
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise CheckpointError(f"checkpoint manifest of run {run!r} at iteration "
                                  f"{resume_iteration} is malformed: {error!r}") from error
        if (manifest.run, manifest.resume_iteration) != (run, resume_iteration):
            raise CheckpointError(
                f"manifest is for run {manifest.run!r} iteration {manifest.resume_iteration}, "
                f"expected {run!r} iteration {resume_iteration}")
        return manifest


def _records(data: Mapping[str, Any]) -> dict[str, ObjectRecord]:
    return {str(name): ObjectRecord(str(r["key"]), str(r["sha256"]), int(r["size"]))
            for name, r in data.items()}


def _own_records(part: Mapping[str, Any], run: str, resume_iteration: int, epoch: int,
                 worker: int) -> dict[str, ObjectRecord]:
    """A part record's objects, once it is shown to be this worker's, of this epoch, naming
    only this epoch's objects: a record another attempt left is never committed."""
    if part.get("worker") != worker or part.get("epoch") != epoch:
        raise CheckpointError(f"part record of worker {worker} in epoch {epoch} says worker "
                              f"{part.get('worker')!r}, epoch {part.get('epoch')!r}")
    records = _records(part["objects"])
    for name, record in records.items():
        if record.key != checkpoint_object_key(run, resume_iteration, epoch, name):
            raise CheckpointError(f"part record of worker {worker} in epoch {epoch} names "
                                  f"{record.key!r}, not this epoch's object {name!r}")
    return records


def _record(key: str, data: ObjectBytes) -> ObjectRecord:
    return ObjectRecord(key, hashlib.sha256(data).hexdigest(), len(data))


# ---- generic: objects, part records, manifest ---------------------------------------------
def put_objects(store: Channel, run: str, resume_iteration: int, epoch: int, worker: int,
                objects: Mapping[str, ObjectSource]) -> None:
    """Write a worker's objects one at a time (only one is made and held at once), then its
    part record (the committer waits for it)."""
    records: dict[str, ObjectRecord] = {}
    for name, source in objects.items():
        key = checkpoint_object_key(run, resume_iteration, epoch, name)
        data = source() if callable(source) else source
        store.put(key, data)
        records[name] = _record(key, data)
        del data  # before the next object is made
    part = {name: {"key": r.key, "sha256": r.sha256, "size": r.size}
            for name, r in records.items()}
    store.put(checkpoint_part_key(run, resume_iteration, epoch, worker),
              json.dumps({"worker": worker, "epoch": epoch, "objects": part},
                         sort_keys=True).encode())


def commit_manifest(store: Channel, run: str, resume_iteration: int, epoch: int, *,
                    workers: int, timeout_s: float = 120.0,
                    meta: Mapping[str, str] | None = None) -> Manifest:
    """Wait for all W part records, then write the manifest — the last write of a segment."""
    deadline = time.monotonic() + timeout_s
    objects: dict[str, ObjectRecord] = {}
    for worker in range(workers):
        # a missing part raises ChannelTimeout naming its key: a peer died while writing,
        # which the state machine reruns like any dead peer (infra/segment_states.py)
        part = json.loads(store.get(
            checkpoint_part_key(run, resume_iteration, epoch, worker), deadline))
        for name, record in _own_records(part, run, resume_iteration, epoch, worker).items():
            if name in objects:
                raise CheckpointError(f"object {name!r} written by two workers")
            objects[name] = record
    manifest = Manifest(run, resume_iteration, epoch, workers, objects, dict(meta or {}))
    key = manifest_key(run, resume_iteration, epoch)
    if not store.put_if_absent(key, manifest.to_json().encode()):
        raise CheckpointError(f"checkpoint manifest {key!r} exists already: another committer "
                              f"of epoch {epoch} got there first, and it is never replaced")
    return manifest


def load_manifest(store: Channel, run: str, resume_iteration: int, epoch: int) -> Manifest:
    """The checkpoint epoch ``epoch`` wrote for a segment starting at ``resume_iteration``."""
    data = store.try_get(manifest_key(run, resume_iteration, epoch))
    if data is None:
        raise CheckpointError(f"no checkpoint manifest of epoch {epoch} for run {run!r} to "
                              f"resume at iteration {resume_iteration}")
    manifest = Manifest.from_json(data, run=run, resume_iteration=resume_iteration)
    if manifest.epoch != epoch:
        raise CheckpointError(f"manifest at epoch {epoch}'s key says epoch {manifest.epoch}")
    return manifest


def read_object(store: Channel, manifest: Manifest, name: str) -> bytes:
    """An object's bytes, verified against the manifest's size and sha256."""
    record = manifest.objects.get(name)
    if record is None:
        raise CheckpointError(
            f"checkpoint at iteration {manifest.resume_iteration} has no object {name!r}")
    data = store.try_get(record.key)
    if data is None:
        raise CheckpointError(f"checkpoint object {record.key!r} is missing")
    if len(data) != record.size or hashlib.sha256(data).hexdigest() != record.sha256:
        raise CheckpointError(f"checkpoint object {record.key!r} does not match its manifest "
                              f"checksum (size {len(data)}, expected {record.size})")
    return data


# ---- array and RNG encodings ----------------------------------------------------------------
def array_bytes(array: np.ndarray) -> bytes:
    """``array`` as .npy bytes (what ``np.save`` writes), joined straight into one object of
    their size: one copy of the array, not a growing stream's."""
    array = np.ascontiguousarray(array)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    return b"".join((header.getvalue(), array.reshape(-1).view(np.uint8).data))


def array_from_bytes(data: ObjectBytes) -> np.ndarray:
    loaded: np.ndarray = np.load(io.BytesIO(data), allow_pickle=False)
    return loaded


def _buffers_bytes(model: torch.nn.Module) -> bytes | None:
    buffers = {name: tensor.detach().cpu().numpy() for name, tensor in model.named_buffers()}
    if not buffers:
        return None
    stream = io.BytesIO()
    np.savez(stream, allow_pickle=False, **buffers)
    return stream.getvalue()


def buffer_arrays(data: bytes) -> dict[str, np.ndarray]:
    """A ``worker/i/buffers`` object's arrays by buffer name."""
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        return {name: arrays[name] for name in arrays.files}


def restore_buffers(model: torch.nn.Module, arrays: Mapping[str, np.ndarray]) -> None:
    """Copy ``arrays`` into ``model``'s buffers; every buffer must be there."""
    with torch.no_grad():
        for name, tensor in model.named_buffers():
            if name not in arrays:
                raise CheckpointError(f"checkpoint lacks model buffer {name!r}")
            tensor.copy_(torch.from_numpy(arrays[name]))


# ---- a K-REDUCE worker's part of a segment checkpoint ---------------------------------------
def save_worker(store: Channel, run: str, epoch: int, worker: KReduceWorker,
                cursor: DataCursor, numpy_rng: np.random.Generator | None = None, *,
                extra_objects: Mapping[str, ObjectSource] | None = None) -> int:
    """Write ``worker``'s share of the checkpoint after its last step, plus
    ``extra_objects`` (e.g. the export's) under their own names, one object at a time.

    Returns the resume iteration the checkpoint is keyed by (last step + 1).
    """
    if worker.last_iteration is None:
        raise CheckpointError("a worker that has not stepped has nothing to checkpoint")
    resume_iteration = worker.last_iteration + 1
    index = worker.worker_id
    prefix = f"worker/{index:04d}"
    source = worker.params_source
    vectors = {**worker.optimizer_state, **worker.exchange_state}
    objects: dict[str, ObjectSource] = {f"{prefix}/{name}": partial(array_bytes, vector)
                                        for name, vector in vectors.items()}
    if index == 0:  # always an aggregator: holds the merged model
        objects["model"] = partial(array_bytes, worker.parameters)
    if source == "own":
        objects[f"{prefix}/params"] = partial(array_bytes, worker.parameters)
    buffers = _buffers_bytes(worker.model)
    if buffers is not None:
        objects[f"{prefix}/buffers"] = buffers
    objects[f"{prefix}/torch_rng"] = torch.get_rng_state().numpy().tobytes()
    state = {"params_source": source, "cursor": cursor.to_dict(),
             "numpy_rng": None if numpy_rng is None else numpy_rng.bit_generator.state}
    objects[f"{prefix}/state.json"] = json.dumps(state, sort_keys=True).encode()
    objects.update(extra_objects or {})
    put_objects(store, run, resume_iteration, epoch, index, objects)
    return resume_iteration


def restore_worker(store: Channel, manifest: Manifest, worker: KReduceWorker,
                   numpy_rng: np.random.Generator | None = None) -> DataCursor:
    """Load ``worker``'s state from a verified checkpoint; returns its data cursor."""
    prefix = f"worker/{worker.worker_id:04d}"
    try:
        state = json.loads(read_object(store, manifest, f"{prefix}/state.json"))
        cursor = DataCursor.from_dict(state["cursor"])
        source = state["params_source"]
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{prefix}/state.json is malformed: {error!r}") from error
    params_object = {"merged": "model", "own": f"{prefix}/params"}.get(source)
    if params_object is None:
        raise CheckpointError(f"{prefix}/state.json: unknown params_source {source!r}")
    merged = array_from_bytes(read_object(store, manifest, "model"))
    parameters = (merged if params_object == "model"
                  else array_from_bytes(read_object(store, manifest, params_object)))
    optimizer_state, exchange_state = (
        {name: array_from_bytes(read_object(store, manifest, f"{prefix}/{name}"))
         for name in names} for names in (worker.optimizer_state, worker.exchange_state))
    try:
        worker.restore(parameters, optimizer_state, last_iteration=manifest.last_iteration,
                       merged=merged, exchange_state=exchange_state)
    except ValueError as error:
        raise CheckpointError(f"checkpoint does not fit this model: {error}") from error
    if f"{prefix}/buffers" in manifest.objects:
        restore_buffers(worker.model,
                        buffer_arrays(read_object(store, manifest, f"{prefix}/buffers")))
    rng_bytes = read_object(store, manifest, f"{prefix}/torch_rng")
    torch.set_rng_state(torch.frombuffer(bytearray(rng_bytes), dtype=torch.uint8))
    if numpy_rng is not None:
        if state["numpy_rng"] is None:
            raise CheckpointError(f"{prefix}: checkpoint holds no numpy RNG state")
        numpy_rng.bit_generator.state = state["numpy_rng"]
    return cursor
