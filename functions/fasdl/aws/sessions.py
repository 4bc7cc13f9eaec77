"""One boto3 Session per process, kept across a warm execution environment's invocations.

Lambda's best practices say to initialize SDK clients outside the handler so that warm
invocations reuse them (https://docs.aws.amazon.com/lambda/latest/dg/best-practices.html). A
new boto3 Session has a botocore loader of its own, which parses the endpoints, the service
model and its endpoint ruleset from JSON again: 0.1-0.2 CPU-s per client, seconds at the
trigger's 0.145 vCPU (docs/results.md, "The trigger's SDK session"). Clients made from one
Session reuse what its loader parsed (~10 ms each).

The Session is keyed by the process's ``AWS_*`` settings (credentials, region, endpoint URLs;
not ``AWS_LAMBDA_*``, which name the function): a changed environment, as in tests that point
one process at several servers, gets a Session of its own rather than stale credentials.
"""

from __future__ import annotations

import os
import threading
from typing import Any

DEFAULT_REGION = "us-east-1"

# boto3 Sessions are not thread-safe (boto3's guide, "Multithreading or multiprocessing with
# clients"): clients are made under this lock; the clients themselves are.
_lock = threading.RLock()
_sessions: dict[tuple[int, tuple[tuple[str, str], ...]], Any] = {}


def _settings_key() -> tuple[int, tuple[tuple[str, str], ...]]:
    # the pid too: a Session must not cross a fork (boto3's guide again)
    return os.getpid(), tuple(sorted(
        (name, value) for name, value in os.environ.items()
        if name.startswith("AWS_") and not name.startswith("AWS_LAMBDA_")))


def session() -> Any:
    """The boto3 Session for the process's current AWS settings (made once per settings)."""
    import boto3

    key = _settings_key()
    with _lock:  # the exchange's threads may make clients at once
        found = _sessions.get(key)
        if found is None:
            found = _sessions[key] = boto3.session.Session()
        return found


def client(service: str, *, config: Any | None = None, endpoint_url: str | None = None,
           region: str | None = None) -> Any:
    """A new boto3 client of ``service`` from :func:`session` (its region, else
    ``region``, else us-east-1). New, so that event hooks registered on it stay its own."""
    with _lock:
        made_by = session()
        return made_by.client(service, endpoint_url=endpoint_url, config=config,
                              region_name=region or made_by.region_name or DEFAULT_REGION)
