"""bench/cold_start.py's results: one child process's sample, the statistics and the verdict
against Lambda's 10-s init phase (pure logic, tested by tests/bench/test_cold_start.py)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

INIT_LIMIT_S = 10.0  # on-demand init phase (lambda-runtime-environment.html)
SAFETY_MARGIN = 0.30  # the cold start must leave this share of the 10 s unused

_CHILD_TIMES = ("unpack_s", "unpack_user_s", "unpack_sys_s", "import_s", "import_user_s",
                "import_sys_s", "maxrss_mb")


class BenchError(RuntimeError):
    """The benchmark cannot run (no layer, a failed child); the message says why."""


@dataclass(frozen=True)
class Sample:
    """One child process: its phases as it measured them, its whole life as the parent saw it."""

    outcome: str  # the loader's: installed (cold) or reused (warm)
    unpack_s: float
    unpack_user_s: float
    unpack_sys_s: float
    import_s: float
    import_user_s: float
    import_sys_s: float
    maxrss_mb: float
    process_s: float  # parent's wall, interpreter start to exit
    process_cpu_s: float  # the child's user + sys from the parent's rusage
    held_s: float  # time the CPU cap held the child stopped

    @property
    def total_s(self) -> float:
        return self.unpack_s + self.import_s

    @property
    def unpack_cpu_s(self) -> float:
        return self.unpack_user_s + self.unpack_sys_s

    @property
    def import_cpu_s(self) -> float:
        return self.import_user_s + self.import_sys_s

    @property
    def cpu_s(self) -> float:
        return self.unpack_cpu_s + self.import_cpu_s


def parse_child(stdout: str, process_s: float, process_cpu_s: float, held_s: float) -> Sample:
    """The child's last stdout line (JSON) plus what the parent measured."""
    lines = stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1])
        times = {name: float(data[name]) for name in _CHILD_TIMES}
        return Sample(outcome=str(data["outcome"]), **times, process_s=process_s,
                      process_cpu_s=process_cpu_s, held_s=held_s)
    except (IndexError, ValueError, KeyError, TypeError) as error:
        raise BenchError(f"cannot read the child's result from {stdout[-500:]!r}: "
                         f"{error!r}") from error


def stats(values: Iterable[float]) -> dict[str, float]:
    items = list(values)
    return {"min": round(min(items), 3), "median": round(statistics.median(items), 3)}


def fits(total_s: float, limit_s: float = INIT_LIMIT_S, margin: float = 0.0) -> bool:
    """Whether ``total_s`` fits ``limit_s`` with ``margin`` (a share of it) left unused."""
    return total_s <= limit_s * (1.0 - margin)


def summarize(memory_mb: int | None, share: float | None, cold: Sequence[Sample],
              warm: Sequence[Sample]) -> dict[str, Any]:
    """One point of the JSON: min/median per quantity; verdicts on the median cold total."""
    def phase(samples: Sequence[Sample]) -> dict[str, Any]:
        return {"unpack_s": stats(s.unpack_s for s in samples),
                "import_s": stats(s.import_s for s in samples),
                "total_s": stats(s.total_s for s in samples),
                "cpu_s": stats(s.cpu_s for s in samples),
                "unpack_user_s": stats(s.unpack_user_s for s in samples),
                "unpack_sys_s": stats(s.unpack_sys_s for s in samples),
                "import_user_s": stats(s.import_user_s for s in samples),
                "import_sys_s": stats(s.import_sys_s for s in samples),
                "process_s": stats(s.process_s for s in samples),
                "process_cpu_s": stats(s.process_cpu_s for s in samples),
                "held_s": stats(s.held_s for s in samples),
                "maxrss_mb": round(max(s.maxrss_mb for s in samples), 1),
                "outcomes": sorted({s.outcome for s in samples})}

    total = statistics.median(s.total_s for s in cold)
    return {"memory_mb": memory_mb, "vcpu": None if share is None else round(share, 4),
            "repeats": len(cold), "cold": phase(cold), "warm": phase(warm),
            "fits_10s": fits(total), "fits_10s_with_margin": fits(total, margin=SAFETY_MARGIN),
            "headroom": round(1.0 - total / INIT_LIMIT_S, 3)}
