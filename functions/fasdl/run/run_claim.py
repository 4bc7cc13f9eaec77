"""One run id is one run: the start that creates ``plan.json`` owns the run.

``plan.json`` is created with S3's conditional write ``If-None-Match: *``: S3 answers 412
Precondition Failed when the key exists, and 409 ConditionalRequestConflict to one of two
concurrent conditional writes, which retries (Amazon S3 User Guide, "How to prevent object
overwrites with conditional writes",
https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html; the SDKs'
IfNoneMatch field says the same). On 412 the existing plan's ``run`` section (the execution's
name and start time, fasdl.contract.run_owner) tells the same execution's retried start
(accepted: it carries on with the plan already there) from another execution, also one that
reuses the name 90 days later (refused with :class:`RunExists`, before anything is
written). Stdlib only: the trigger passes its boto3 client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fasdl.aws.s3_errors import is_missing
from fasdl.contract.errors import RunExists
from fasdl.contract.keys import plan_key
from fasdl.contract.plan import Plan
from fasdl.contract.run_owner import RunOwner
from fasdl.run.fencing import read_epoch

CLAIM_ATTEMPTS = 5  # 409 ConditionalRequestConflict: a concurrent write; ask again
_PRECONDITION_FAILED = frozenset({"PreconditionFailed", "412"})
_CONFLICT = frozenset({"ConditionalRequestConflict", "409"})


def _code(error: BaseException) -> object:
    response = getattr(error, "response", None)
    return response.get("Error", {}).get("Code") if isinstance(response, dict) else None


def _read(s3: Any, bucket: str, key: str) -> bytes | None:
    try:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as error:
        if not is_missing(error):
            raise
        return None
    return body


def _owner(existing: bytes) -> RunOwner:
    """The execution that claimed the run; nobody ("") for a plan without a ``run`` section
    (frozen before it existed, issue 40), so no execution may take it over."""
    owner = Plan.from_json(existing.decode()).run
    return owner if owner is not None else RunOwner(run_id="", execution="")


def _refuse(run_id: str, owner: str, where: str) -> RunExists:
    return RunExists(f"run {run_id!r} already exists and belongs to execution {owner} "
                     f"({where}); this execution stops without touching it: choose a new "
                     f"run_id")


def check_fence_is_ours(s3: Any, bucket: str, *, fence_key: str, plan_key: str, run_id: str,
                        execution: str, started: str) -> None:
    """Before anything is written: an existing fence must be this execution's own earlier try
    (its plan names this execution). A fence without a plan is a leftover of another run (its
    plan expired or was deleted): a fresh start must not bump it, nor mix epochs with it."""
    if _read(s3, bucket, fence_key) is None:
        return
    existing = _read(s3, bucket, plan_key)
    if existing is None:
        raise _refuse(run_id, "'unknown'", f"s3://{bucket}/{fence_key} exists without a plan")
    owner = _owner(existing)
    if not owner.is_execution(execution, started):
        raise _refuse(run_id, owner.describe(), f"s3://{bucket}/{plan_key}")


def claim_plan(s3: Any, bucket: str, key: str, body: bytes, *, run_id: str,
               execution: str, started: str) -> bytes:
    """Create the run's plan unless it exists; returns the plan the run goes on with (ours,
    or the one our own earlier try wrote). Raises :class:`RunExists` for another execution's."""
    for _ in range(CLAIM_ATTEMPTS):
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json",
                          IfNoneMatch="*")
        except Exception as error:
            code = _code(error)
            if code in _CONFLICT:
                continue
            if code not in _PRECONDITION_FAILED:
                raise
        else:
            return body
        existing = _read(s3, bucket, key)
        if existing is None:  # deleted between our write and the read: try again
            continue
        owner = _owner(existing)
        if not owner.is_execution(execution, started):
            raise _refuse(run_id, owner.describe(), f"s3://{bucket}/{key}")
        return existing
    raise RunExists(f"run {run_id!r}: s3://{bucket}/{key} kept conflicting with concurrent "
                    f"writes after {CLAIM_ATTEMPTS} attempts; another start is racing for "
                    f"this run id")


def foreign_failure(store: Any, run_id: str, state: Mapping[str, Any],
                    execution_arn: str, started: str) -> str | None:
    """Why finalize ``failed`` must leave run ``run_id`` alone, or None when it is this
    execution's to record and clean. With a run state: only while the fence is still at its
    epoch (a newer attempt owns the run otherwise). Without one (the start failed): only if no
    plan is there or the plan names this execution, started at ``started`` (``store``: the
    results S3Channel)."""
    run = state.get("run")
    if isinstance(run, Mapping) and isinstance(run.get("segment"), Mapping):
        epoch = run["segment"].get("epoch")
        current = read_epoch(store, run_id)
        if current != epoch:
            return (f"run {run_id!r}: the fence is at epoch {current}, this execution's run "
                    f"state at {epoch}: the run belongs to a newer attempt")
        return None
    given = state.get("input")
    if isinstance(given, Mapping) and "resume" in given:  # a continued run: not the plan's
        return None  # first execution, and not started, so nothing of it to tell apart
    existing = store.try_get(plan_key(run_id))
    execution = execution_arn.rsplit(":", 1)[-1]
    if existing is not None and not (owner := _owner(existing)).is_execution(execution, started):
        return (f"run {run_id!r} belongs to execution {owner.describe()}, not this one "
                f"({execution!r}, started {started or 'at an unknown time'})")
    return None
