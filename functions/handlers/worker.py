"""Worker Lambda: one worker's part of one segment (infra/contract.py WorkerEvent).

Event ``{"action": "train", "run_id", "plan_key", "segment", "worker"}`` → trains the segment
(fasdl.segment_runner), writes the result JSON to
``runs/<run_id>/segments/<index:05d>/attempt-<a>/worker-<w:04d>.json`` in the results bucket and
returns the same small object (the state machine discards it). Raises SegmentTooLong when the
remaining time cannot fit another iteration plus the checkpoint.
"""

from __future__ import annotations

from typing import Any

from fasdl.torch_setup import TorchUnavailable, prepare_torch

TORCH_PROBLEM = prepare_torch()  # in the init phase: the layer unpack is the slow part
if TORCH_PROBLEM is None:
    from fasdl import segment_runner

from fasdl.environment import Settings  # noqa: E402
from fasdl.metrics import StepMetrics, get_logger  # noqa: E402

logger = get_logger("fasdl-worker")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    if TORCH_PROBLEM is not None:
        raise TorchUnavailable(TORCH_PROBLEM)
    settings = Settings.from_env()
    parsed = segment_runner.WorkerEvent.parse(event)
    logger.append_keys(run_id=parsed.run_id, worker=parsed.worker, segment=parsed.index,
                       attempt=parsed.attempt)
    metrics = StepMetrics(settings.metrics_namespace, settings.stack)
    s3 = settings.s3_client()

    def remaining_s() -> float:
        if context is None or not hasattr(context, "get_remaining_time_in_millis"):
            return float("inf")
        return float(context.get_remaining_time_in_millis()) / 1000.0

    try:
        result = segment_runner.run_segment(settings, parsed, remaining_s, metrics, s3)
    except Exception:
        logger.exception("segment failed")
        raise
    finally:
        metrics.flush()
    key = segment_runner.write_result(s3, settings, parsed, result)
    logger.info("segment done", extra={"result_key": key, "loss": result["loss_last"],
                                       "accuracy": result["accuracy"]})
    return result
