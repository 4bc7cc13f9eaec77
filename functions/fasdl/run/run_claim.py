"""One run id is one run: the start that creates ``plan.json`` owns the run.

``plan.json`` is created with S3's conditional write ``If-None-Match: *``: "If the object
already exists, the write fails with a 412 Precondition Failed", and of two racing
conditional writes S3 may answer "409 Conflict" to one, which retries (Amazon S3 User Guide,
"Add preconditions to S3 operations with conditional requests",
https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-requests.html and
conditional-writes.html). On 412 the existing plan's ``provenance.execution`` tells the
same execution's retried start (accepted: it carries on with the plan already there) from
another execution (refused with :class:`RunExists`, before anything is written). Stdlib only:
the trigger passes its boto3 client.
"""

from __future__ import annotations

from typing import Any

from fasdl.aws.s3_errors import is_missing
from fasdl.contract.errors import RunExists
from fasdl.contract.plan import Plan

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


def _owner(existing: bytes) -> str:
    return str(Plan.from_json(existing.decode()).provenance.get("execution", ""))


def _refuse(run_id: str, owner: str, where: str) -> RunExists:
    return RunExists(f"run {run_id!r} already exists and belongs to execution {owner!r} "
                     f"({where}); this execution stops without touching it: choose a new "
                     f"run_id")


def check_fence_is_ours(s3: Any, bucket: str, *, fence_key: str, plan_key: str, run_id: str,
                        execution: str) -> None:
    """Before anything is written: an existing fence must be this execution's own earlier try
    (its plan names this execution). A fence without a plan is a leftover of another run (its
    plan expired or was deleted): a fresh start must not bump it, nor mix epochs with it."""
    if _read(s3, bucket, fence_key) is None:
        return
    existing = _read(s3, bucket, plan_key)
    if existing is None:
        raise _refuse(run_id, "unknown", f"s3://{bucket}/{fence_key} exists without a plan")
    owner = _owner(existing)
    if owner != execution or not execution:
        raise _refuse(run_id, owner, f"s3://{bucket}/{plan_key}")


def claim_plan(s3: Any, bucket: str, key: str, body: bytes, *, run_id: str,
               execution: str) -> bytes:
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
        if owner != execution or not execution:
            raise _refuse(run_id, owner, f"s3://{bucket}/{key}")
        return existing
    raise RunExists(f"run {run_id!r}: s3://{bucket}/{key} kept conflicting with concurrent "
                    f"writes after {CLAIM_ATTEMPTS} attempts; another start is racing for "
                    f"this run id")
