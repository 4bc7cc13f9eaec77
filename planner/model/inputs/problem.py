"""The planner's input: one planning problem (a workload on a platform under a deadline and a
global-batch cap), and why a configuration of it can be infeasible. Every model term, search and
report reads a :class:`Problem`; planner/model/terms/cost_model.py evaluates configurations of
it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from fasdl.contract.cache import MAX_ECPU_PER_SECOND, MIN_ECPU_PER_SECOND
from fasdl.contract.fields import FieldError, is_integral, is_real
from fasdl.contract.keys import MAX_EXCHANGE_KEY_PREFIXES
from fasdl.contract.plan import EXCHANGE_DTYPES, MAX_EXCHANGE_CHUNKS, UPLOAD_BYTES_PER_VALUE
from planner.model.inputs.profile_fields import ProfileError
from planner.model.inputs.profiles import PlatformProfile, Prices, WorkloadProfile

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
MAX_PROBLEM_DEADLINE_S = 1e9  # the largest deadline a problem takes
# The default --timeout-margin: 60 s, but never more than this share of --timeout.
MAX_MARGIN_SECONDS, MARGIN_SHARE = 60.0, 0.1


def default_timeout_margin(timeout_s: float) -> float:
    """min(60 s, 10 % of the timeout): 60 s at the 900-s default, 6 s at Lambda's 60-s floor."""
    return min(MAX_MARGIN_SECONDS, MARGIN_SHARE * timeout_s)


class ModelInputError(FieldError):
    """A planning problem with an invalid field; the message names it and its range."""

    field: str

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}", field_name, message)


class Violation(IntEnum):
    """Why a configuration is infeasible, in the order the checks bind."""

    NONE = 0
    MEMORY = 1            # a role's batch exceeds its B_M, or M + m <= 0
    GLOBAL_BATCH = 2      # B^g > B^g_max
    ALIGNMENT = 3         # B^n < B^a after clipping (K < W)
    DATASET = 4           # B^g > D: an epoch would have no iteration
    LAMBDA_TIMEOUT = 5    # not even one iteration fits a segment
    DEADLINE = 6          # T > T_max
    # Account quotas cut the grid rather than fail a configuration, so evaluate() never returns
    # these; planner/search/quotas.py names them when raising the quota would make a plan feasible.
    MAX_MEMORY = 7        # M above the account's function-memory quota
    MAX_CONCURRENCY = 8   # 2·W above the account's concurrent executions
    # Checked after every other constraint: a configuration marked so meets all the others,
    # so it is the furthest through the checks (Valkey only;
    # planner/model/terms/cache_throughput.py)
    CACHE_THROUGHPUT = 9  # the exchange's peak ECPU/s above the cache's maximum
    S3_REQUEST_RATE = 10  # S3: requests per second per key prefix above S3's documented rates


VIOLATION_TEXT: dict[Violation, str] = {
    Violation.MEMORY: "memory: a batch does not fit the function memory (k·B + c + buffers)",
    Violation.GLOBAL_BATCH: "max-global-batch: K·B^a + (W−K)·B^n exceeds the cap",
    Violation.ALIGNMENT: "alignment: the non-aggregator batch B^n falls below B^a",
    Violation.DATASET: "dataset: the global batch exceeds the number of samples",
    Violation.LAMBDA_TIMEOUT: "lambda-timeout: load + one iteration + checkpoint exceed the "
                              "function timeout minus its margin",
    Violation.DEADLINE: "deadline: the predicted end-to-end time exceeds the deadline",
    Violation.MAX_MEMORY: "max-memory: a feasible configuration needs more function memory "
                          "than the account's quota allows",
    Violation.MAX_CONCURRENCY: "max-concurrency: a feasible configuration needs more workers "
                               "than the account's concurrency allows (2·W executions)",
    Violation.CACHE_THROUGHPUT: "cache-throughput: the exchange's peak ECPU/s exceeds what one "
                                "ElastiCache Serverless cache allows (CacheUsageLimits "
                                "ECPUPerSecond maximum, at most 15,000,000)",
    Violation.S3_REQUEST_RATE: "s3-request-rate: the exchange asks a key prefix for more than "
                               "S3's 3,500 PUT/DELETE or 5,500 GET requests per second",
}


@dataclass(frozen=True)
class Problem:
    """One planning problem: a workload on a platform under a deadline and a batch cap."""

    workload: WorkloadProfile
    platform: PlatformProfile
    prices: Prices
    epochs: int
    deadline_s: float
    max_global_batch: int
    timeout_s: float = 900.0
    timeout_margin_s: float = 60.0
    memory_min_mb: int = 128
    memory_max_mb: int = 10240
    memory_step_mb: int = 128
    batch_step: int = 16
    max_workers: int = 1000
    min_workers: int = 1
    clip_bn: bool = True
    own_shard_local: bool = True  # the runtime's traffic; False: the paper's Eq. 3-2/3-4
    exchange_memory: bool = True  # exchange buffers in M_B per role; False: paper's 4-1
    exchange_chunks: int = 1  # C > 1: the pipelined exchange (planner/model/terms/pipelined.py)
    # bfloat16: uploaded shards are bf16 differences (fasdl.exchange.codec), half the bytes
    exchange_dtype: str = "float32"
    # Valkey: a plan's peak ECPU/s must stay within one cache's maximum (math.inf lifts it, to
    # ask whether it binds)
    max_cache_ecpu_per_s: float = float(MAX_ECPU_PER_SECOND)
    # S3: the most hashed key prefixes a plan may spread its exchange keys over (the planner
    # picks the fewest within S3's per-prefix rates, planner/model/terms/s3_rates.py), and whether
    # those rates bind (False lifts them, to ask whether they bind)
    max_exchange_key_prefixes: int = MAX_EXCHANGE_KEY_PREFIXES
    s3_request_limits: bool = True
    # Valkey: the cache already serves the plan's ECPU/s (its minimum in force), so no fresh
    # cache's ramp is charged (planner/model/terms/cache_ramp.py)
    cache_warm: bool = False
    # At most this many iterations per segment (None: as many as the timeout fits). A re-plan
    # keeps its plan's segment length as this ceiling: a change never checkpoints less often
    # than planned (planner/adapt/plan_problem.py)
    segment_iterations_max: int | None = None

    def __post_init__(self) -> None:
        _check_int("epochs", self.epochs, 1, 100_000)
        _check_number("deadline_s", self.deadline_s, 1.0, MAX_PROBLEM_DEADLINE_S)
        _check_int("max_global_batch", self.max_global_batch, 1, 10_000_000)
        _check_number("timeout_s", self.timeout_s, 60.0, 900.0)
        _check_number("timeout_margin_s", self.timeout_margin_s, 0.0, self.timeout_s / 2)
        _check_int("memory_min_mb", self.memory_min_mb, 128, 10240)
        _check_int("memory_max_mb", self.memory_max_mb, self.memory_min_mb, 10240)
        _check_int("memory_step_mb", self.memory_step_mb, 1, 10240)
        _check_int("batch_step", self.batch_step, 1, 4096)
        _check_int("max_workers", self.max_workers, 1, 1000)
        _check_int("min_workers", self.min_workers, 1, self.max_workers)
        _check_int("exchange_chunks", self.exchange_chunks, 1, MAX_EXCHANGE_CHUNKS)
        if self.segment_iterations_max is not None:
            _check_int("segment_iterations_max", self.segment_iterations_max, 1, 10**9)
        if self.max_cache_ecpu_per_s != math.inf:
            _check_number("max_cache_ecpu_per_s", self.max_cache_ecpu_per_s,
                          MIN_ECPU_PER_SECOND, MAX_ECPU_PER_SECOND)
        _check_int("max_exchange_key_prefixes", self.max_exchange_key_prefixes, 1,
                   MAX_EXCHANGE_KEY_PREFIXES)
        try:  # a region without a confirmed cache price cannot price a Valkey plan
            self.prices.require_channel(self.channel)
        except ProfileError as error:
            raise ModelInputError("prices", error.detail) from error
        if self.exchange_dtype not in EXCHANGE_DTYPES:
            raise ModelInputError("exchange_dtype", f"must be one of "
                                  f"{', '.join(EXCHANGE_DTYPES)}, got {self.exchange_dtype!r}")

    @property
    def upload_share(self) -> float:
        """Bytes of an uploaded shard over its float32 bytes (merged shards stay float32)."""
        return UPLOAD_BYTES_PER_VALUE[self.exchange_dtype] / 4.0

    @property
    def channel(self) -> str:
        return self.platform.channel

    @property
    def arch(self) -> str:
        return self.platform.arch

    def memory_grid(self) -> IntArray:
        """M from the top down in steps of 128 MB, as the thesis searches it."""
        grid = np.arange(self.memory_max_mb, self.memory_min_mb - 1, -self.memory_step_mb)
        return np.sort(grid.astype(np.int64))

    def batch_grid(self, upper: int) -> IntArray:
        return np.arange(self.batch_step, upper + 1, self.batch_step, dtype=np.int64)

    def worker_range(self) -> range:
        """W from ``min_workers`` (2 restricts a search to distributed runs) to the limit."""
        return range(self.min_workers, self.worker_limit() + 1)

    def worker_limit(self) -> int:
        """Largest W worth considering: every worker trains at least one batch step."""
        return max(1, min(self.max_workers, self.max_global_batch // self.batch_step))


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if not is_integral(value):
        raise ModelInputError(name, f"must be an integer in [{low}, {high}], got {value!r}")
    if not low <= int(value) <= high:
        raise ModelInputError(name, f"must be in [{low}, {high}], got {value}")


def _check_number(name: str, value: object, low: float, high: float) -> None:
    if not is_real(value):
        raise ModelInputError(name, f"must be a number in [{low}, {high}], got {value!r}")
    if not low <= float(value) <= high:
        raise ModelInputError(name, f"must be in [{low}, {high}], got {value}")
