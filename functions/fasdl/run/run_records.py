"""An adaptive run's records in the results bucket, as its re-plan step reads and writes them
(planner/adapt/run_step.py's ``RunStore``): any key under the runs prefix, created once with a
conditional write, and a segment's measured role times from its workers' results.

S3's conditional write (``If-None-Match: *``) answers 412 PreconditionFailed when the key
exists (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html), so of
two attempts of the step the first record stays and the second reads it. Stdlib and the
caller's boto3 client only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fasdl.contract.settings import Settings
from fasdl.run.results import kept_attempts, segment_results
from fasdl.run.role_times import role_times

CONFLICT_CODES = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


class RunRecords:
    """The results bucket of ``settings`` (keys are full keys, runs prefix included)."""

    def __init__(self, s3: Any, settings: Settings) -> None:
        self._s3 = s3
        self._settings = settings

    def read(self, key: str) -> bytes | None:
        try:
            body: bytes = self._s3.get_object(Bucket=self._settings.results_bucket,
                                              Key=key)["Body"].read()
        except self._s3.exceptions.NoSuchKey:
            return None
        return body

    def create(self, key: str, data: bytes) -> bool:
        """Write ``key`` unless it exists; False when it did (or a racing write won)."""
        try:
            self._s3.put_object(Bucket=self._settings.results_bucket, Key=key, Body=data,
                                ContentType="application/json", IfNoneMatch="*")
        except self._s3.exceptions.ClientError as error:
            if str(error.response.get("Error", {}).get("Code")) in CONFLICT_CODES:
                return False
            raise
        return True

    def segment_roles(self, run_id: str, index: int) -> Mapping[str, Mapping[str, Any]] | None:
        """The role times of segment ``index``'s kept attempt; None without results."""
        found = segment_results(self._s3, self._settings, run_id, index=index)
        if not found:
            return None
        (_, items), = kept_attempts(found, None).values()
        return role_times([(index, items)]) or None
