"""A run's measured time per role, what ``python -m planner calibrate`` refits profiles from.

Per role (``aggregator``: workers 0..K-1 at batch B^a, ``non_aggregator``: K..W-1 at B^n) of
the segment attempts a run continued from (fasdl.run.results.summarize), at the run's memory
size:

* ``compute_s_per_iteration`` and ``exchange_s_per_iteration``: the workers' step split
  (fasdl.exchange.step_stats: exchange = upload + aggregate + download + idle) summed over
  their iterations, divided by those iterations; ``iteration_s`` is their sum;
* ``startup_s``: per invocation, what came before the first iteration: the handler's time
  outside the segment (the torch load of a cold sandbox, writing the result), from the
  billed duration, plus the segment's ``load_s`` (plan, dataset partition, checkpoint);
  ``cold_startup_s``: the same over the first segment's invocations, which start fresh
  sandboxes;
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
ROLE_FIELD, BATCH_FIELD = "role", "batch"  # what a worker result says of itself


def role_of(worker: int, aggregators: int) -> str:
    return ROLES[0] if worker < aggregators else ROLES[1]


def _startup_s(result: Mapping[str, Any]) -> float | None:
    """Seconds before the invocation's first iteration; None without its billed record."""
    times, record = result.get("time", {}), result.get(INVOCATION_FIELD)
    if not isinstance(record, dict) or "billed_ms" not in record or "total_s" not in times:
        return None
    outside = max(0.0, float(record["billed_ms"]) / 1000.0 - float(times["total_s"]))
    return outside + float(times.get("load_s", 0.0))


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _one_role(items: list[tuple[int, Mapping[str, Any]]]) -> dict[str, Any]:
    iterations = sum(int(result.get("iterations_done", 0)) for _, result in items)
    compute = sum(float(result.get("time", {}).get("compute_s", 0.0)) for _, result in items)
    exchange = sum(float(result.get("time", {}).get(name, 0.0)) for _, result in items
                   for name in ("upload_s", "aggregate_s", "download_s", "idle_s"))
    startups = [(index, s) for index, result in items
                if (s := _startup_s(result)) is not None]
    records = [result[INVOCATION_FIELD] for _, result in items
               if isinstance(result.get(INVOCATION_FIELD), dict)]
    memories = sorted({int(record["memory_mb"]) for record in records})
    batches = sorted({int(result[BATCH_FIELD]) for _, result in items if BATCH_FIELD in result})

    def per_iteration(total: float) -> float | None:
        return round(total / iterations, 6) if iterations else None

    return {
        "workers": len({int(result["worker"]) for _, result in items}),
        "memory_mb": memories[0] if len(memories) == 1 else None,
        "batch": batches[0] if len(batches) == 1 else None,
        "invocations": len(items), "iterations": iterations,
        "compute_s_per_iteration": per_iteration(compute),
        "exchange_s_per_iteration": per_iteration(exchange),
        "iteration_s": per_iteration(compute + exchange),
        "startup_s": _mean([s for _, s in startups]),
        "cold_startup_s": _mean([s for index, s in startups if index == 0]),
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
