"""What the Distributed Map's children reported, summed up for the ``Segment outcome?`` Choice.

The Distributed Map's children never fail (infra/segment_states.py); each returns
``{"worker", "status", "error"}``. Step Functions documents intrinsic arguments as plain
paths, so no ``States.ArrayContains($[*].status, ...)`` or filter expression can tell which
statuses occurred: the trigger's ``outcome`` action does (fasdl.contract.events). W = 1,000
children of ~60 bytes fit the 256 KiB payload limit. Pure stdlib.
"""

from __future__ import annotations

from collections.abc import Mapping

from fasdl.contract.events import OK_STATUS, SegmentOutcome
from fasdl.contract.fields import is_int_at_least
from fasdl.run.run_state import RunStateError


def _statuses(value: object) -> list[str]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(each, str) and each for each in value)):
        raise RunStateError(f"event field 'statuses': must be a non-empty list of names, "
                            f"got {value!r}")
    return list(value)


def summarize(event: Mapping[str, object]) -> SegmentOutcome:
    """``occurred[s]``: some child ended with status ``s``; ``workers[s]``: which, sorted.
    Every status of ``statuses`` gets both keys, so the Choice never reads a missing path (a
    States.Runtime error no Catch may stop)."""
    statuses = _statuses(event.get("statuses"))
    results = event.get("results")
    if not isinstance(results, list):
        raise RunStateError(f"event field 'results': must be the Map's list of child results, "
                            f"got {type(results).__name__}")
    workers: dict[str, list[int]] = {status: [] for status in statuses}
    for index, result in enumerate(results):
        worker = result.get("worker") if isinstance(result, dict) else None
        status = result.get("status") if isinstance(result, dict) else None
        if not is_int_at_least(worker, 0) or not isinstance(status, str):
            raise RunStateError(f"event field 'results[{index}]': must be "
                                f"{{worker, status, error}}, got {result!r}")
        if status == OK_STATUS:
            continue
        if status not in workers:
            raise RunStateError(f"event field 'results[{index}].status': must be "
                                f"{OK_STATUS} or one of {statuses}, got {status!r}")
        workers[status].append(worker)
    return {"occurred": {status: bool(found) for status, found in workers.items()},
            "workers": {status: sorted(found) for status, found in workers.items()}}
