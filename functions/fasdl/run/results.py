"""What finalize writes: the final model, the metrics summary, the failure record; and cleanup.

Objects in the results bucket, under ``runs/<run_id>/``:

* ``model.npy``: the merged flat float32 parameter vector, copied verbatim from the last
  checkpoint after its sha256 was checked against the manifest (``model_key``);
* ``model.safetensors``: worker 0's complete state dict, batch-norm statistics included
  (fasdl.training.export), copied verbatim and checked likewise from the last checkpoint's
  export objects (``export_key``); ``model.json``: their description of how to rebuild the
  module, plus the run id, the iterations and the sha256 of ``model.safetensors``. A
  checkpoint without export objects (written before workers made them) publishes neither;
* ``summary.json``: per segment (the attempt that completed) mean loss over the workers,
  worker 0's held-out accuracy and, for two-class workloads, its Matthews correlation
  (``mcc``, CoLA's metric), time split summed over the workers, wall time and billed GB-s;
  plus run totals and ``measured`` (elapsed time, Lambda GB-s, requests and cost beside the
  plan's predictions: fasdl.run.usage) and ``roles``, each role's measured time per
  iteration, startup and billed duration (fasdl.run.role_times, what planner calibrate reads);
* ``failure.json``: the state machine's error, what to do about it when its name alone does
  not say (``advice``, fasdl.contract.errors.failure_advice; else null) and the last run state
  of a failed run.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fasdl.contract import keys
from fasdl.contract.errors import failure_advice
from fasdl.contract.keys import EXPORT_OBJECTS, manifest_key
from fasdl.contract.settings import Settings
from fasdl.exchange import stores
from fasdl.run.role_times import role_times
from fasdl.run.usage import results_usage

_RESULT_KEY = re.compile(r"segments/(\d{5})/attempt-(\d+)/worker-(\d{4})\.json$")
_SAFE_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
READ_THREADS = 32  # finalize's result GETs in flight (stores.s3_client's pool: 32)


def _put_json(s3: Any, bucket: str, key: str, data: Mapping[str, Any]) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(data, indent=1, sort_keys=True).encode(),
                  ContentType="application/json")


def segment_results(s3: Any, settings: Settings, run_id: str, *, index: int | None = None,
                    threads: int = READ_THREADS) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """Every worker result JSON of the run (``index``: of that segment only, every attempt),
    keyed by (segment index, attempt), in listing order. W x segments x attempts GETs one
    by one could outlast finalize's 900 s in a wide, long run, so up to ``threads`` are in
    flight (boto3 clients are thread-safe; the client's pool holds 32 connections); the
    first failed read fails finalize, as before."""
    prefix = settings.segments_prefix(run_id) + ("" if index is None else f"{index:05d}/")
    listed: list[tuple[str, tuple[int, int]]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=settings.results_bucket,
                                                             Prefix=prefix):
        for item in page.get("Contents", []):
            match = _RESULT_KEY.search(item["Key"])
            if match is not None:
                listed.append((item["Key"], (int(match[1]), int(match[2]))))

    def read(key: str) -> dict[str, Any]:
        body = s3.get_object(Bucket=settings.results_bucket, Key=key)["Body"].read()
        result: dict[str, Any] = json.loads(body)
        return result

    found: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    with ThreadPoolExecutor(max_workers=threads) as pool:  # map keeps the listing's order
        for (_, segment), result in zip(listed, pool.map(read, [key for key, _ in listed]),
                                        strict=True):
            found[segment].append(result)
    return dict(found)


def kept_attempts(results: Mapping[tuple[int, int], list[dict[str, Any]]],
                  workers: int | None) -> dict[int, tuple[int, list[dict[str, Any]]]]:
    """Per segment: the highest attempt with all W results (the one the run continued from),
    else its first attempt. ``workers`` None: each segment's own W, the most results any of
    its attempts has (an adaptive run changes W between segments; a segment the run went on
    from has a complete attempt)."""
    full: dict[int, int] = {}
    for (index, _), items in results.items():
        full[index] = workers if workers is not None else max(full.get(index, 0), len(items))
    chosen: dict[int, tuple[int, list[dict[str, Any]]]] = {}
    for (index, attempt), items in sorted(results.items()):
        if len(items) == full[index] or index not in chosen:
            chosen[index] = (attempt, items)
    return chosen


def summarize(results: Mapping[tuple[int, int], list[dict[str, Any]]],
              workers: int | None) -> dict[str, Any]:
    """Per segment: the highest attempt with all W results (the one the run continued from;
    ``workers`` None: each segment's own W, :func:`kept_attempts`)."""
    chosen = kept_attempts(results, workers)
    segments: list[dict[str, Any]] = []
    totals: dict[str, float] = defaultdict(float)
    for index, (attempt, items) in sorted(chosen.items()):
        items = sorted(items, key=lambda item: int(item["worker"]))
        losses = [item["loss_mean"] for item in items if item.get("loss_mean") is not None]
        times: dict[str, float] = defaultdict(float)
        for item in items:
            for name, value in item.get("time", {}).items():
                times[name] += float(value)
        for name, value in times.items():
            totals[name] += value
        first = items[0]
        segments.append({
            "index": index, "attempt": attempt, "workers_reported": len(items),
            "iterations": first.get("iterations_done"),
            "loss_mean": sum(losses) / len(losses) if losses else None,
            "loss_last": first.get("loss_last") if int(first["worker"]) == 0 else None,
            "accuracy": first.get("accuracy") if int(first["worker"]) == 0 else None,
            "mcc": first.get("mcc") if int(first["worker"]) == 0 else None,
            "time_s": dict(times),
            "wall_s": max(float(item.get("time", {}).get("total_s", 0.0)) for item in items),
            # every attempt's recorded invocations (fasdl.run.usage), not just the kept one
            "billed_gb_s": round(sum(results_usage(found)[0] for (i, _), found
                                     in results.items() if i == index), 3),
        })
    final = segments[-1] if segments else {}
    retries = sum(1 for (index, attempt) in results if attempt > 0)
    return {"segments": segments, "final_loss": final.get("loss_mean"),
            "final_accuracy": final.get("accuracy"), "final_mcc": final.get("mcc"),
            "time_s": dict(totals),
            "iterations": sum(int(s["iterations"] or 0) for s in segments),
            "retried_attempts": retries,
            # per role: time per iteration, startup, billed duration (fasdl.run.role_times)
            "roles": role_times((index, items) for index, (_, items) in sorted(chosen.items())),
            "exchange_throttled_retries": sum(int(item.get("exchange_throttled_retries", 0))
                                              for items in results.values() for item in items)}


class ResultError(RuntimeError):
    """The final checkpoint is missing or does not match its manifest."""


def final_model(s3: Any, settings: Settings, run_id: str, resume_iteration: int,
                epoch: int) -> tuple[dict[str, Any], bytes]:
    """The manifest and the verified ``model`` object of the run's last checkpoint.

    Reads fasdl.run.checkpoint's manifest format with the stdlib only, so finalize needs neither
    torch nor numpy (tests check it agrees with fasdl.run.checkpoint's writer).
    """
    key = settings.results_key(manifest_key(run_id, resume_iteration, epoch))
    try:
        body = s3.get_object(Bucket=settings.results_bucket, Key=key)["Body"].read()
        manifest = json.loads(body)
        record = manifest["objects"]["model"]
        data: bytes = s3.get_object(Bucket=settings.results_bucket,
                                    Key=settings.results_key(record["key"]))["Body"].read()
    except Exception as error:
        raise ResultError(f"run {run_id!r}: no complete checkpoint at iteration "
                          f"{resume_iteration} (s3://{settings.results_bucket}/{key}): "
                          f"{error}") from error
    if len(data) != record["size"] or hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise ResultError(f"run {run_id!r}: final model {record['key']!r} does not match its "
                          f"manifest checksum")
    return manifest, data


def final_object(s3: Any, settings: Settings, run_id: str, manifest: Mapping[str, Any],
                 name: str) -> bytes | None:
    """The verified object ``name`` of a final checkpoint's manifest; None when it has none."""
    record = manifest.get("objects", {}).get(name)
    if record is None:
        return None
    try:
        data: bytes = s3.get_object(Bucket=settings.results_bucket,
                                    Key=settings.results_key(record["key"]))["Body"].read()
    except Exception as error:
        raise ResultError(f"run {run_id!r}: final checkpoint object {record.get('key')!r} "
                          f"listed in the manifest cannot be read: {error}") from error
    if len(data) != record["size"] or hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise ResultError(f"run {run_id!r}: final checkpoint object {record['key']!r} does not "
                          f"match its manifest checksum")
    return data


def publish_export(s3: Any, settings: Settings, run_id: str, manifest: Mapping[str, Any],
                   iterations: int) -> str | None:
    """model.safetensors, then model.json, from the last checkpoint's export objects; the
    key of model.safetensors, or None (nothing written) for a checkpoint without them."""
    weights, described = (final_object(s3, settings, run_id, manifest, EXPORT_OBJECTS[name])
                          for name in ("model.safetensors", "model.json"))
    if weights is None or described is None:
        if weights is not None or described is not None:
            raise ResultError(f"run {run_id!r}: the final checkpoint holds only one of "
                              f"{', '.join(EXPORT_OBJECTS.values())}")
        return None
    try:
        meta = json.loads(described)
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != 1:  # fasdl.training.export's
        raise ResultError(f"run {run_id!r}: {EXPORT_OBJECTS['model.json']!r} of the final "
                          f"checkpoint is not a JSON export description of format 1")
    meta.update(iterations=iterations, sha256=hashlib.sha256(weights).hexdigest(),
                run_id=run_id)
    export_key = settings.final_key(run_id, "model.safetensors")
    s3.put_object(Bucket=settings.results_bucket, Key=export_key, Body=weights,
                  ContentType="application/octet-stream")
    _put_json(s3, settings.results_bucket, settings.final_key(run_id, "model.json"), meta)
    return export_key


def write_final(s3: Any, settings: Settings, run: Mapping[str, Any], execution: str, *,
                measured: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """model.npy, model.safetensors + model.json and summary.json (with ``measured``: the
    run's measured figures beside the predictions, fasdl.run.run_record) for a finished run;
    returns FinalizeResult."""
    run_id = str(run["run_id"])
    final_iteration = int(run["segment"]["start_iteration"])
    # the done state's resume_epoch: the epoch of the segment that finished the run
    manifest, model = final_model(s3, settings, run_id, final_iteration,
                                  int(run["segment"]["resume_epoch"]))
    model_key = settings.final_key(run_id, "model.npy")
    s3.put_object(Bucket=settings.results_bucket, Key=model_key, Body=model)
    # the complete state dict and its description: python -m fasdl.evaluate reads them
    export_key = publish_export(s3, settings, run_id, manifest, final_iteration)
    workers = len(run.get("workers", [])) or int(manifest["workers"])
    summary = {"run_id": run_id, "execution": execution, "plan_key": run.get("plan_key"),
               "model_key": model_key, "export_key": export_key, "workers": workers,
               # each segment's own W: an adaptive run changes it between segments
               **summarize(segment_results(s3, settings, run_id), None),
               "measured": dict(measured) if measured is not None else None}
    adaptations = adaptation_records(s3, settings, run_id)
    if adaptations:  # an adaptive run's decisions (planner/adapt/run_step.py)
        summary["adaptations"] = adaptations
    summary_key = settings.summary_key(run_id)
    _put_json(s3, settings.results_bucket, summary_key, summary)
    return {"run_id": run_id, "model_key": model_key, "summary_key": summary_key,
            "extra": {"export_key": export_key, "final_loss": summary["final_loss"],
                      "final_accuracy": summary["final_accuracy"],
                      "final_mcc": summary["final_mcc"],
                      "iterations": summary["iterations"]}}


def adaptation_records(s3: Any, settings: Settings, run_id: str) -> list[dict[str, Any]]:
    """An adaptive run's decisions, one per segment boundary, in segment order (the step
    writes each once, so what is listed is final)."""
    prefix = settings.results_key(keys.adaptations_prefix(run_id))
    listed = [item["Key"]
              for page in s3.get_paginator("list_objects_v2").paginate(
                  Bucket=settings.results_bucket, Prefix=prefix)
              for item in page.get("Contents", [])]
    records = []
    for key in sorted(listed):
        body = s3.get_object(Bucket=settings.results_bucket, Key=key)["Body"].read()
        records.append(json.loads(body))
    return records


def failed_run_id(state: Mapping[str, Any], execution: str) -> str:
    """The run a failure belongs to: run state, else input, else the execution's name."""
    run = state.get("run")
    candidates = [run.get("run_id") if isinstance(run, dict) else None]
    given = state.get("input")
    if isinstance(given, dict):
        resume = given.get("resume")
        candidates += [given.get("run_id"),
                       resume.get("run_id") if isinstance(resume, dict) else None]
    candidates.append(execution.rsplit(":", 1)[-1])
    for candidate in candidates:
        if isinstance(candidate, str) and _SAFE_RUN_ID.fullmatch(candidate):
            return candidate
    return "unknown-run"


def write_failure(s3: Any, settings: Settings, state: Mapping[str, Any], execution: str, *,
                  extra: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """failure.json: the error, the last run state and ``extra`` (fasdl.run.run_record)."""
    run_id = failed_run_id(state, execution)
    found = state.get("error")
    error: Mapping[str, Any] = found if isinstance(found, dict) else {}
    key = settings.failure_key(run_id)
    _put_json(s3, settings.results_bucket, key, {
        "run_id": run_id, "execution": execution, "error": error.get("Error"),
        "cause": error.get("Cause"), "advice": failure_advice(error.get("Error")),
        "run": state.get("run"), "input": state.get("input"), **(extra or {})})
    return run_id, key


def clean_exchange(settings: Settings, run_id: str, key_prefixes: int = 1) -> int:
    """Delete every exchange key of the run (S3 prefix, under each of the plan's
    ``key_prefixes`` hashed prefixes, or Valkey SCAN); returns the count."""
    channel = stores.exchange_channel(settings, key_prefixes)
    try:
        return channel.delete_prefix(f"{run_id}/")
    finally:
        channel.close()
