"""Fault injection and cleanup checks for ``python -m local run`` (local/run/runner.py).

* ``--inject-env ROLE:KEY=VALUE`` adds a variable to one function's environment, e.g. the
  worker's test hooks (fasdl.run.fault_hooks: ``FASDL_TEST_CRASH_AT_ITERATION``...);
* ``--restart-cache-at N`` restarts the Valkey server once a shard of iteration N is in it:
  its keys are lost, like a cache node replaced mid-run;
* :func:`exchange_left` counts the run's exchange keys finalize left behind (report.json),
  under any hashed key prefix.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from fasdl.contract.keys import MAX_EXCHANGE_KEY_PREFIXES, exchange_labels, run_prefix
from local.servers.layout import LAYOUT
from local.servers.managed import RedisTlsClusterServer, ValkeyServer

ROLES = ("worker", "trigger", "finalize")
_ITERATION = re.compile(r"/it/(\d{8})/")


class InputError(ValueError):
    """Bad input to ``python -m local run``; nothing was started."""


def parse_inject_env(text: str) -> tuple[str, str, str]:
    """``ROLE:KEY=VALUE`` (ROLE worker, trigger or finalize) → (role, key, value)."""
    role, _, assignment = text.partition(":")
    key, equals, value = assignment.partition("=")
    if role not in ROLES or not equals or not key.isidentifier():
        raise InputError(f"--inject-env {text!r}: expected ROLE:KEY=VALUE with ROLE one of "
                         f"{', '.join(ROLES)}")
    return role, key, value


def restarting(on_poll: Callable[[], None], cache: ValkeyServer | RedisTlsClusterServer,
               run_id: str, iteration: int, say: Callable[[str], None]) -> Callable[[], None]:
    """``on_poll`` that also restarts the cache once it holds a shard of ``iteration`` or
    later (at or after: old iterations are deleted faster than a poll may come)."""
    client: list[Any] = []

    def reached() -> bool:
        if not client:
            client.append(cache.client())
        for key in client[0].scan_iter(match=f"{LAYOUT.exchange_run_prefix(run_id)}*/it/*",
                                        count=1000):
            found = _ITERATION.search(key.decode() if isinstance(key, bytes) else str(key))
            if found and int(found.group(1)) >= iteration:
                return True
        return False

    def poll() -> None:
        on_poll()
        if client == [None] or not reached():
            return  # restarted already, or not there yet
        client[0].close()
        client[0] = None
        began = time.monotonic()
        cache.restart()  # its keys are gone: in-flight shards are lost, workers reconnect
        say(f"restarted {cache.name} at iteration {iteration} in "
            f"{time.monotonic() - began:.1f} s")

    return poll


def exchange_left(client: Any, run_id: str,
                   cache: ValkeyServer | RedisTlsClusterServer | None) -> int:
    """Exchange keys of the run still stored (finalize deletes them on both paths)."""
    if cache is not None:
        valkey = cache.client()
        try:
            return sum(1 for _ in valkey.scan_iter(
                match=f"{LAYOUT.exchange_run_prefix(run_id)}*", count=1000))
        finally:
            valkey.close()
    # S3 keys may sit under a hashed label (training.exchange_key_prefixes): one listing of
    # the exchange prefix, every label a plan can use (fasdl.contract.keys.spread_key)
    labels = set(exchange_labels(MAX_EXCHANGE_KEY_PREFIXES))
    run = run_prefix(run_id)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=LAYOUT.exchange_bucket,
                                                            Prefix=LAYOUT.exchange_prefix)
    names = (item["Key"][len(LAYOUT.exchange_prefix):] for page in pages
             for item in page.get("Contents", []))
    return sum(1 for name in names
               if name.startswith(run) or (name[:3] in labels and name[3:].startswith(run)))
