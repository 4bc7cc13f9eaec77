"""What the run's invocations used and suffered, for report.json and the printed summary:
each invocation's memory size and peak RSS, the out-of-memory kills, the injected service
errors (local/lambda_/emulator.py records all of it on each Invocation)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from local.lambda_.invocation import Invocation


def annotate_report(report: dict[str, Any], invocations: Sequence[Invocation],
                    roles: Mapping[str, str], *, memory_limit: bool) -> None:
    """Add ``memory`` and ``service_errors`` to ``report`` and each of its ``invocations``
    rows (built from the same sequence, in order) its ``memory_mb``, ``peak_rss_mb`` and
    ``service_error``. ``roles``: function name → worker, trigger or finalize."""
    rows = report.get("invocations", [])
    for row, invocation in zip(rows, invocations, strict=True):
        row.update(memory_mb=invocation.memory_mb, peak_rss_mb=invocation.peak_rss_mb,
                   service_error=invocation.service_error.name
                   if invocation.service_error is not None else None)
    functions: dict[str, dict[str, Any]] = {}
    injected: dict[str, Counter[str]] = {}
    for invocation in invocations:
        role = roles.get(invocation.function, invocation.function)
        if invocation.service_error is not None:
            injected.setdefault(role, Counter())[invocation.service_error.name] += 1
            continue
        entry = functions.setdefault(role, {"function": invocation.function,
                                            "memory_mb": invocation.memory_mb,
                                            "peak_rss_mb": 0.0, "invocations": 0,
                                            "out_of_memory": 0})
        entry["invocations"] += 1
        entry["out_of_memory"] += int(invocation.out_of_memory)
        entry["peak_rss_mb"] = max(entry["peak_rss_mb"], invocation.peak_rss_mb or 0.0)
    report["memory"] = {"limit": "on" if memory_limit else "off", "functions": functions}
    report["service_errors"] = {role: dict(counts) for role, counts in injected.items()}


def format_limits(report: dict[str, Any]) -> str:
    """One line on memory, one on injected service errors when there were any."""
    memory = report.get("memory", {})
    parts = [f"{role} {entry['peak_rss_mb']:.0f} of {entry['memory_mb']} MB"
             + (f" ({entry['out_of_memory']} killed)" if entry["out_of_memory"] else "")
             for role, entry in sorted(memory.get("functions", {}).items())]
    lines = [f"  peak RSS per function (memory limit {memory.get('limit', 'on')}): "
             f"{', '.join(parts) or 'no invocation ran'}"]
    injected = report.get("service_errors", {})
    if injected:
        lines.append("  injected service errors (nothing ran): " + ", ".join(
            f"{role} {name} x{count}" for role, counts in sorted(injected.items())
            for name, count in counts.items()))
    return "\n".join(lines)
