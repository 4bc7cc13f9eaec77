"""Worker Lambda: one worker's part of one segment (fasdl/contract/events.py WorkerPayload).

Event ``{"action": "train", "run_id", "plan_key", "segment", "worker", "cache"}`` (``cache``:
the Valkey endpoint the trigger found, null for S3 plans) → trains the segment
(fasdl.run.segment_runner), writes the result JSON to
``runs/<run_id>/segments/<index:05d>/attempt-<a>/worker-<w:04d>.json`` in the results bucket and
returns the same small object (the state machine discards it). The result's ``invocation``
(fasdl.run.usage) is this invocation's duration so far and memory size: what Lambda bills,
which the trigger's guards and finalize's summary add up. Raises SegmentTooLong when the
remaining time cannot fit another iteration plus the checkpoint.

The first invocation in a sandbox loads torch (unpack + import, fasdl.aws.torch_setup) before it
trains; that time is logged ("torch loaded", ``torch_load_s``), metered as ``TorchLoadTime``
and comes out of the invocation's remaining time like everything else.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from fasdl.aws import heap
from fasdl.aws.metrics import StepMetrics, get_logger, get_metrics
from fasdl.aws.torch_setup import load_torch
from fasdl.contract.cache import parse_endpoint
from fasdl.contract.settings import Settings
from fasdl.exchange import stores
from fasdl.run import usage
from fasdl.run.fault_hooks import FaultHooks

logger = get_logger("fasdl-worker")
metrics = get_metrics()
heap.configure_allocator()  # at Init, before any worker thread allocates (fasdl.aws.heap)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics  # flushes what is left at the end, also when the segment failed
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    began = time.monotonic()
    # torch is loaded here, not at import: the unpack does not fit Lambda's 10-s init phase
    # at small memory (docs/cold-start.md). Only a sandbox's first invocation pays it.
    heap.release_memory()  # what a previous invocation in this sandbox left behind
    torch_load = load_torch()
    torch_load.check()
    from fasdl.run import segment_runner  # imports torch, so only once torch is importable

    try:
        cache = parse_endpoint(event.get("cache"), "cache")
    except ValueError as error:
        raise segment_runner.WorkerEventError(f"event {error}") from error
    settings = Settings.from_env().with_cache(cache)
    parsed = segment_runner.WorkerEvent.parse(event)
    logger.append_keys(run_id=parsed.run_id, worker=parsed.worker, segment=parsed.index,
                       attempt=parsed.attempt, epoch=parsed.epoch)
    step_metrics = StepMetrics(settings.metrics_namespace, settings.stack, metrics)
    if torch_load.fresh:
        logger.info("torch loaded", extra=torch_load.log_fields())
        metrics.add_metric(name="TorchLoadTime", unit=MetricUnit.Seconds,
                           value=torch_load.seconds)
    s3 = stores.s3_client(settings)

    def remaining_s() -> float:
        return float(context.get_remaining_time_in_millis()) / 1000.0

    try:
        result = segment_runner.run_segment(settings, parsed, remaining_s, step_metrics, s3,
                                            invocation_id=context.aws_request_id,
                                            hooks=FaultHooks.from_env())
    except Exception:
        logger.exception("segment failed")
        raise
    result[usage.INVOCATION_FIELD] = usage.invocation_record(time.monotonic() - began,
                                                             usage.memory_of(context))
    key = segment_runner.write_result(s3, settings, parsed, result)
    logger.info("segment done", extra={"result_key": key, "loss": result["loss_last"],
                                       "accuracy": result["accuracy"]})
    return result
