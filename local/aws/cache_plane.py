"""ElastiCache's ``DescribeServerlessCaches`` on a loopback port, for the trigger's lookup of
the exchange cache (fasdl/contract/cache.py) in local Valkey runs.

On AWS the cache lives in ``FasdlCacheStack``; the trigger finds its endpoint by name on every
action. Locally the "cache stack" is the Valkey server the runner starts, and this server
answers for it with the query protocol's XML, as ElastiCache does (the request is a form POST
with ``Action=DescribeServerlessCaches``; errors are ``<ErrorResponse>`` documents with the
fault code, ``ServerlessCacheNotFoundFault`` for an unknown name). ``--cache-stack`` models
the states a user can meet: ``deployed`` (default: deployed a day ago), ``absent`` (destroyed
between runs and not deployed again), ``creating:N`` (the first N lookups see a cache still
being created; created when the runner starts) and ``age:S`` (deployed S seconds before the
run's first lookup, however late the machine's load puts it: a plan that waits for the
pre-scaled minimum, ``prediction.cache_wait_s``, holds its first segment until the cache is
that old, fasdl/aws/cache_lookup.py). Every answer
carries the cache's ``CreateTime`` and the ECPU/s limits its synthesized stack sets.
API: https://docs.aws.amazon.com/AmazonElastiCache/latest/APIReference/API_DescribeServerlessCaches.html
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from local.aws.loopback import HOST, LoopbackServer, Reply, Request

XML = {"Content-Type": "text/xml"}
NAMESPACE = "http://elasticache.amazonaws.com/doc/2015-02-02/"
ACTION = "DescribeServerlessCaches"
NOT_FOUND = "ServerlessCacheNotFoundFault"
STATES = ("deployed", "absent", "creating:N", "age:S")
DEPLOYED_AGE_S = 86_400.0  # ``deployed``: long enough for any pre-scaled minimum


@dataclass(frozen=True)
class CacheStackState:
    deployed: bool = True
    creating_lookups: int = 0  # lookups answered "creating" before "available"
    age_s: float = DEPLOYED_AGE_S  # how long before the first lookup it was created

    @classmethod
    def parse(cls, text: str) -> CacheStackState:
        """``deployed``, ``absent``, ``creating:N`` (N >= 1) or ``age:S`` (S >= 0 s)."""
        if text == "deployed":
            return cls()
        if text == "absent":
            return cls(deployed=False)
        kind, _, count = text.partition(":")
        if kind == "creating" and count.isdigit() and int(count) >= 1:
            return cls(creating_lookups=int(count), age_s=0.0)
        if kind == "age" and count.replace(".", "", 1).isdigit():
            return cls(age_s=float(count))
        raise argparse.ArgumentTypeError(
            f"--cache-stack must be one of {', '.join(STATES)} (N >= 1, S >= 0 seconds), got "
            f"{text!r}")

    def describe(self) -> str:
        if not self.deployed:
            return "stack absent"
        if self.creating_lookups:
            return f"created after {self.creating_lookups} lookups"
        return "deployed" if self.age_s == DEPLOYED_AGE_S else f"deployed {self.age_s:g} s ago"


class LocalElastiCache(LoopbackServer):
    """Answers DescribeServerlessCaches for one cache name while open."""

    title = "local ElastiCache API"

    def __init__(self, name: str, port: int, state: CacheStackState,
                 ecpu_per_second: Mapping[str, int] | None = None) -> None:
        super().__init__()
        self.name = name
        self.port = port
        self.state = state
        # the stack's CacheUsageLimits.ECPUPerSecond (Maximum, Minimum), as it deployed them
        self.ecpu_per_second = dict(ecpu_per_second or {})
        self.lookups = 0
        self._lock = threading.Lock()
        self._create_time = ""  # set by the first lookup: see CacheStackState.age_s

    def create_time(self) -> str:
        """``CreateTime`` as ElastiCache writes it; anchored at the first lookup so that a
        slow start of the runner cannot age the cache past what the caller asked for."""
        with self._lock:
            if not self._create_time:
                created = datetime.fromtimestamp(time.time() - self.state.age_s, tz=UTC)
                self._create_time = created.isoformat(timespec="milliseconds").replace(
                    "+00:00", "Z")
            return self._create_time

    def answer(self, request: Request) -> Reply:
        form = {key: values[0] for key, values in parse_qs(request.body.decode()).items()}
        if form.get("Action") != ACTION:
            return _fault(400, "InvalidAction", f"not served locally: {form.get('Action')!r}")
        name = form.get("ServerlessCacheName", "")
        if not self.state.deployed or name != self.name:
            return _fault(404, NOT_FOUND, f"ServerlessCache {name} not found.")
        with self._lock:
            self.lookups += 1
            creating = self.lookups <= self.state.creating_lookups
        endpoint = "" if creating else (f"<Endpoint><Address>{HOST}</Address>"
                                        f"<Port>{self.port}</Port></Endpoint>")
        cache = (f"<member><ServerlessCacheName>{escape(name)}</ServerlessCacheName>"
                 f"<Status>{'creating' if creating else 'available'}</Status>"
                 f"<Engine>valkey</Engine><CreateTime>{self.create_time()}</CreateTime>"
                 f"{self._usage_limits()}{endpoint}</member>")
        return 200, XML, (f'<{ACTION}Response xmlns="{NAMESPACE}"><{ACTION}Result>'
                          f"<ServerlessCaches>{cache}</ServerlessCaches></{ACTION}Result>"
                          f"<ResponseMetadata><RequestId>local</RequestId></ResponseMetadata>"
                          f"</{ACTION}Response>").encode()


    def _usage_limits(self) -> str:
        if not self.ecpu_per_second:
            return ""
        limits = "".join(f"<{name}>{value}</{name}>"
                         for name, value in sorted(self.ecpu_per_second.items()))
        return f"<CacheUsageLimits><ECPUPerSecond>{limits}</ECPUPerSecond></CacheUsageLimits>"


def _fault(status: int, code: str, message: str) -> Reply:
    return status, XML, (f'<ErrorResponse xmlns="{NAMESPACE}"><Error><Type>Sender</Type>'
                         f"<Code>{code}</Code><Message>{escape(message)}</Message></Error>"
                         "<RequestId>local</RequestId></ErrorResponse>").encode()
