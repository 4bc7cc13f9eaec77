"""A worker's measured memory peak, from Lambda's own REPORT log lines.

Lambda writes one line per invocation to the function's log group::

    REPORT RequestId: <id>  Duration: 2500.00 ms  Billed Duration: 2500 ms
    Memory Size: 256 MB  Max Memory Used: 256 MB

A worker killed for memory is not always reported as ``Runtime.OutOfMemory``: AWS's own
troubleshooting shows it as ``Runtime.ExitError`` "Runtime exited with error: signal: killed"
with Max Memory Used at the memory size (knowledge-center/lambda-runtime-error). The
workflow reruns a crashed segment at the same size, which would die again; so before that
rerun the trigger reads the REPORT lines of the failed attempt's window (FilterLogEvents) and,
when a worker used (nearly) all of its memory, fails the run at once with the measured peak,
as for ``Runtime.OutOfMemory``. Lambda may write no REPORT line for a hard kill: then nothing
is found and the bounded crash retries stay the fallback.
API: https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_FilterLogEvents.html
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fasdl.contract.errors import same_size_advice

REPORT_PATTERN = '"Max Memory Used"'  # FilterLogEvents term filter: REPORT lines only
_REPORT = re.compile(r"REPORT RequestId:\s*(?P<id>\S+).*?Memory Size:\s*(?P<size>\d+)\s*MB"
                     r".*?Max Memory Used:\s*(?P<used>\d+(?:\.\d+)?)\s*MB", re.S)
# A worker at 98 % of its memory size when it died was killed for memory (Lambda rounds, and
# samples the peak, so a killed invocation can report just under the size).
EXHAUSTED_SHARE = 0.98
MAX_PAGES = 20  # 10,000 events at most: every REPORT line of a 1,000-worker segment and more


class WorkerOutOfMemory(RuntimeError):
    """A worker of the failed attempt used all its memory: a same-size rerun would die too."""


@dataclass(frozen=True)
class MemoryPeak:
    request_id: str
    memory_mb: int
    max_used_mb: float

    @property
    def exhausted(self) -> bool:
        return self.max_used_mb >= EXHAUSTED_SHARE * self.memory_mb


def parse_report(message: str) -> MemoryPeak | None:
    found = _REPORT.search(message)
    if found is None:
        return None
    return MemoryPeak(found["id"], int(found["size"]), float(found["used"]))


def peaks_since(client: Any, log_group: str, since_ms: int) -> list[MemoryPeak]:
    """Every REPORT line written to ``log_group`` since ``since_ms`` (epoch milliseconds)."""
    found: list[MemoryPeak] = []
    request: dict[str, Any] = {"logGroupName": log_group, "startTime": max(0, since_ms),
                               "filterPattern": REPORT_PATTERN}
    for _ in range(MAX_PAGES):
        page = client.filter_log_events(**request)
        found += [peak for event in page.get("events", [])
                  if (peak := parse_report(str(event.get("message", "")))) is not None]
        if not page.get("nextToken"):
            break
        request["nextToken"] = page["nextToken"]
    return found


def check_not_exhausted(peaks: Iterable[MemoryPeak]) -> None:
    """Raise :class:`WorkerOutOfMemory` naming the highest peak when any worker ran out."""
    exhausted = sorted((p for p in peaks if p.exhausted), key=lambda p: -p.max_used_mb)
    if not exhausted:
        return
    top = exhausted[0]
    raise WorkerOutOfMemory(
        f"{len(exhausted)} worker invocation(s) of the failed attempt used all their memory: "
        f"Max Memory Used {top.max_used_mb:g} MB of the planned M = Memory Size "
        f"{top.memory_mb} MB (request {top.request_id}, REPORT line in the worker's log "
        f"group); Lambda reported the kill as a crash. {same_size_advice(top.memory_mb)}")


def check_failed_attempt(client: Any, log_group: str, *, now_ms: int, window_s: float) -> None:
    """Before a crashed segment is rerun: did a worker of it run out of memory? ``window_s``
    covers the attempt (the worker timeout and the task's slack)."""
    check_not_exhausted(peaks_since(client, log_group, now_ms - int(window_s * 1000)))
