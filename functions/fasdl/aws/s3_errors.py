"""Whether an S3 error means "no such object", in one place for every caller.

Stdlib only, and duck-typed on the botocore ClientError's ``response`` dict: the trigger's
modules (fasdl.run.run_state, fasdl.run.dataset_check) are passed a client and import no boto3,
while
the worker (fasdl.run.segment_runner) and the S3 channel use the same test on the ClientErrors
they catch.
"""

from __future__ import annotations

# a GET names the error NoSuchKey; a HEAD has no body, so its code is the status (404/NotFound)
MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def is_missing(error: BaseException) -> bool:
    """Whether ``error`` says the object does not exist."""
    response = getattr(error, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return code in MISSING_CODES
