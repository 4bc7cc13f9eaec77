"""A run's measured time per role, what ``python -m planner calibrate`` refits profiles from.

Per role (``aggregator``: workers 0..K-1 at batch B^a, ``non_aggregator``: K..W-1 at B^n) of
the segment attempts a run continued from (fasdl.run.results.summarize), at the run's memory
size:

* ``compute_s_per_iteration`` and ``exchange_s_per_iteration``: the workers' step split
  (fasdl.exchange.step_stats: exchange = upload + aggregate + download + idle) summed over
  their iterations, divided by those iterations; ``iteration_s`` is their sum;
* ``cold_start_s``: per invocation of the first segment (fresh sandboxes), the handler's time
  outside the segment, from the billed duration: the torch load of a cold sandbox and writing
  the result, what the planner's cold start predicts; ``warm_start_s``: the same over later
  segments' invocations; ``load_s``: the segment's own start per invocation (plan, dataset
  partition, checkpoint restore);
* ``billed_s``: the invocations' billed duration (1 ms granularity, fasdl.run.usage).

Lambda bills the handler's duration rounded up to the millisecond
(https://aws.amazon.com/lambda/pricing/); the REPORT line's "Billed Duration" is that figure
plus, since August 2025, the INIT phase
(https://aws.amazon.com/blogs/compute/aws-lambda-standardizes-billing-for-init-phase/), which
the workers keep short by loading torch in the handler (fasdl.aws.torch_setup). Stdlib only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from fasdl.run.usage import INVOCATION_FIELD

ROLES = ("aggregator", "non_aggregator")
# what a worker result says of itself
ROLE_FIELD, BATCH_FIELD, WORKLOAD_FIELD = "role", "batch", "workload"


def role_of(worker: int, aggregators: int) -> str:
    return ROLES[0] if worker < aggregators else ROLES[1]


def _outside_s(result: Mapping[str, Any]) -> float | None:
    """The handler's seconds outside the segment; None without its billed record."""
    times, record = result.get("time", {}), result.get(INVOCATION_FIELD)
    if not isinstance(record, dict) or "billed_ms" not in record or "total_s" not in times:
        return None
    return max(0.0, float(record["billed_ms"]) / 1000.0 - float(times["total_s"]))


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _one_role(items: list[tuple[int, Mapping[str, Any]]]) -> dict[str, Any]:
    iterations = sum(int(result.get("iterations_done", 0)) for _, result in items)
    compute = sum(float(result.get("time", {}).get("compute_s", 0.0)) for _, result in items)
    exchange = sum(float(result.get("time", {}).get(name, 0.0)) for _, result in items
                   for name in ("upload_s", "aggregate_s", "download_s", "idle_s"))
    outside = [(index, s) for index, result in items
               if (s := _outside_s(result)) is not None]
    records = [result[INVOCATION_FIELD] for _, result in items
               if isinstance(result.get(INVOCATION_FIELD), dict)]
    memories = sorted({int(record["memory_mb"]) for record in records})
    batches = sorted({int(result[BATCH_FIELD]) for _, result in items if BATCH_FIELD in result})
    workloads = sorted({str(result[WORKLOAD_FIELD]) for _, result in items
                        if WORKLOAD_FIELD in result})

    def per_iteration(total: float) -> float | None:
        return round(total / iterations, 6) if iterations else None

    return {
        "workload": workloads[0] if len(workloads) == 1 else None,
        "workers": len({int(result["worker"]) for _, result in items}),
        "memory_mb": memories[0] if len(memories) == 1 else None,
        "batch": batches[0] if len(batches) == 1 else None,
        "invocations": len(items), "iterations": iterations,
        "compute_s_per_iteration": per_iteration(compute),
        "exchange_s_per_iteration": per_iteration(exchange),
        "iteration_s": per_iteration(compute + exchange),
        "cold_start_s": _mean([s for index, s in outside if index == 0]),
        "warm_start_s": _mean([s for index, s in outside if index > 0]),
        "load_s": _mean([float(result.get("time", {}).get("load_s", 0.0))
                         for _, result in items]),
        "billed_s": round(sum(int(record["billed_ms"]) for record in records) / 1000.0, 3),
    }


def role_times(segments: Iterable[tuple[int, list[dict[str, Any]]]]) -> dict[str, Any]:
    """``{role: figures}`` over (segment index, the kept attempt's results); a role no
    result names (results written before workers recorded it) is left out."""
    by_role: dict[str, list[tuple[int, Mapping[str, Any]]]] = defaultdict(list)
    for index, results in segments:
        for result in results:
            role = result.get(ROLE_FIELD)
            if role in ROLES:
                by_role[str(role)].append((index, result))
    return {role: _one_role(by_role[role]) for role in ROLES if by_role[role]}
