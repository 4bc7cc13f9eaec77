"""The platform as the exchange's requests see it: a store that meters requests per key holds
each request to its key's rate, whatever the network could move.

ElastiCache Serverless serves about 30,000 ECPU/s per hash slot (AWS's "Scaling ElastiCache"
page; the platform profile's ``cache_slot_ecpu_per_s``) at 1 ECPU per KB
(``prices.valkey_kb_per_ecpu``): one GET or SET of a large value moves at most
slot · kb_per_ecpu / 1024 MB/s, ~29 MB/s at AWS's figures, below what a Lambda connection
moves. The exchange's transfer terms (exchange_time.py, pipelined.py's callers) take their
throughputs from :func:`exchange_platform`; loads and checkpoints go to S3 and keep the fit.
Keys read by many workers at once share their slot on top of this (cache_throughput.py's
slot floors). S3's per-prefix request rates are per second, not per byte: no ceiling here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from planner.model.inputs.platform_profile import PlatformProfile
from planner.model.terms.exchange_cost import KB_PER_MB

if TYPE_CHECKING:
    from planner.model.inputs.problem import Problem



def _slot_mb_per_s(problem: Problem) -> float:
    return (problem.platform.cache_slot_ecpu_per_s * problem.prices.valkey_kb_per_ecpu
            / KB_PER_MB)


# the channels whose requests are held per key, and the MB/s one request gets
CEILINGS: Mapping[str, Callable[[Problem], float]] = {"valkey": _slot_mb_per_s}


# (platform, ceiling) -> the capped copy: a search evaluates the same problem thousands of
# times, and a profile's copy is checked field by field (~85 µs). The key holds the platform
# itself, so its id is never reused while cached.
_CAPPED: dict[tuple[int, float], tuple[PlatformProfile, PlatformProfile]] = {}
CACHED_MAX = 64


def exchange_platform(problem: Problem) -> PlatformProfile:
    """``problem.platform`` with the channel's per-request ceiling (module docstring)."""
    ceiling = CEILINGS.get(problem.channel)
    if ceiling is None:
        return problem.platform
    mb_per_s = ceiling(problem)
    key = (id(problem.platform), mb_per_s)
    cached = _CAPPED.get(key)
    if cached is None or cached[0] is not problem.platform:
        if len(_CAPPED) >= CACHED_MAX:
            _CAPPED.clear()
        cached = _CAPPED[key] = (problem.platform,
                                 replace(problem.platform, request_mb_per_s_max=mb_per_s))
    return cached[1]
