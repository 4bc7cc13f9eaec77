"""Whether a workload fit may be planned with: the quality gates of ``planner fit`` and
``python -m local profile``.

A fit passes by **shape** (R² >= MIN_R_SQUARED and every relative error <= MAX_RELATIVE_ERROR)
or by the **absolute floor**: every error within a stated absolute size and a stated share of
what it feeds. Small models need the floor: their steps of a few ms carry noise of a ms or two,
so R² and relative errors come out poor although no plan could be misled by them.

* time (a, b, m): each sample's error <= MAX_TIME_ERROR_S and <= MAX_ITERATION_SHARE of the
  predicted iteration at that batch and memory: the predicted step plus the smallest exchange
  any data-parallel plan makes there, one upload and one download of half the model (two
  workers) through the fitted platform (the step alone when no platform was fitted);
* memory (k, c): each sample's error <= MAX_MEMORY_ERROR_MB, an eighth of the planner's
  128 MB memory step (planner/model/inputs/problem.py).

The verdict and its reason go to ``summary.json`` and, when it fails, into the workload's
provenance (``failed_fit``), which ``planner plan`` states on its first line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from planner.fit.workload_fit import Quality

MIN_R_SQUARED = 0.9
MAX_RELATIVE_ERROR = 0.25
MAX_TIME_ERROR_S = 0.005
MAX_ITERATION_SHARE = 0.10
MAX_MEMORY_ERROR_MB = 16.0


@dataclass(frozen=True)
class Gate:
    """One fit's verdict: ``passed_by`` is ``shape``, ``absolute floor`` or None (failed)."""

    fit: str  # "time (a, b, m)" or "memory (k, c)"
    passed_by: str | None
    reason: str

    @property
    def passed(self) -> bool:
        return self.passed_by is not None

    def to_dict(self) -> dict[str, Any]:
        return {"fit": self.fit, "passed": self.passed, "passed_by": self.passed_by,
                "reason": self.reason}


def _shape(quality: Quality) -> str | None:
    """Why the shape gate fails (None: it passes)."""
    if quality.r_squared >= MIN_R_SQUARED and quality.max_relative_error <= MAX_RELATIVE_ERROR:
        return None
    return (f"R² {quality.r_squared:.4f} (>= {MIN_R_SQUARED} wanted), max relative error "
            f"{quality.max_relative_error:.1%} (<= {MAX_RELATIVE_ERROR:.0%} wanted)")


def judge_time(quality: Quality, errors_s: NDArray[np.float64],
               iterations_s: NDArray[np.float64]) -> Gate:
    """The time fit's gate; ``errors_s``: |predicted − measured| per sample, ``iterations_s``:
    the predicted iteration at each sample (module docstring)."""
    name = "time (a, b, m)"
    shape = _shape(quality)
    if shape is None:
        return Gate(name, "shape", "R² and relative error within the gates")
    worst_s = float(np.max(errors_s))
    share = float(np.max(errors_s / iterations_s))
    floor = (f"worst error {worst_s * 1e3:.2f} ms (<= {MAX_TIME_ERROR_S * 1e3:g} ms) and "
             f"{share:.1%} of the predicted iteration (<= {MAX_ITERATION_SHARE:.0%})")
    if worst_s <= MAX_TIME_ERROR_S and share <= MAX_ITERATION_SHARE:
        return Gate(name, "absolute floor", f"{shape}, but {floor}")
    return Gate(name, None, f"{shape}; {floor}")


def judge_memory(quality: Quality) -> Gate:
    """The memory fit's gate (module docstring)."""
    name = "memory (k, c)"
    shape = _shape(quality)
    if shape is None:
        return Gate(name, "shape", "R² and relative error within the gates")
    floor = (f"worst error {quality.max_absolute_error:.1f} MB "
             f"(<= {MAX_MEMORY_ERROR_MB:g} MB)")
    if quality.max_absolute_error <= MAX_MEMORY_ERROR_MB:
        return Gate(name, "absolute floor", f"{shape}, but {floor}")
    return Gate(name, None, f"{shape}; {floor}")


def failed_reason(gates: list[Gate]) -> str | None:
    """One line naming every failed gate, or None when all pass."""
    failed = [f"the {gate.fit} fit: {gate.reason}" for gate in gates if not gate.passed]
    return "; ".join(failed) if failed else None


def advice() -> str:
    return ("profile batches further apart (8x, e.g. --batches 8 64), more --memories "
            "covering the plan's, or more --repeats")


# The provenance group (planner/model/inputs/provenance.py) each gated fit sets.
GATE_GROUPS = {"time (a, b, m)": "compute", "memory (k, c)": "memory"}
GATES = {"min_r_squared": MIN_R_SQUARED, "max_relative_error": MAX_RELATIVE_ERROR,
         "max_time_error_s": MAX_TIME_ERROR_S, "max_iteration_share": MAX_ITERATION_SHARE,
         "max_memory_error_mb": MAX_MEMORY_ERROR_MB}
