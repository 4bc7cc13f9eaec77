"""Hypothesis example counts by tier. `make test` runs each property test at its full count;
`make test-fast` (``FASDL_FAST_TIER=1``, the Makefile sets it) runs the search-equivalence
properties, the tier's heaviest (each example runs an exhaustive search), at a quarter of it,
at least :data:`FAST_MIN`: every property still runs, with fewer random problems."""

from __future__ import annotations

import os

FAST_TIER_ENV = "FASDL_FAST_TIER"
FAST_SHARE = 4
FAST_MIN = 5


def fast_tier() -> bool:
    return os.environ.get(FAST_TIER_ENV) == "1"


def examples(full: int) -> int:
    """``full`` examples, or (the fast tier) a quarter of them, at least FAST_MIN."""
    return max(FAST_MIN, full // FAST_SHARE) if fast_tier() else full
