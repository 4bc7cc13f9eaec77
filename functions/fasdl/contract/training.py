"""The plan's ``training`` section: how a run proceeds (read by the trigger and the workers):
aggregators K, batch sizes B^a/B^n and their arithmetic (the global batch, each worker's share
of the data), epochs, segment length and the recipe. Pure Python, like fasdl.contract.plan,
which re-exports every name here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fasdl.contract.fields import PlanError, require_choice, require_float, require_int
from fasdl.contract.keys import MAX_EXCHANGE_KEY_PREFIXES
from fasdl.contract.lr_scaling import require_scaled_rate
from fasdl.contract.workload import AUGMENTATIONS


# ---- batch arithmetic of a K-REDUCE run (the plan and the planner) ----------------------
def global_batch(workers: int, aggregators: int, batch_aggregator: int,
                 batch_non_aggregator: int) -> int:
    """B^g = K·B^a + (W−K)·B^n  (FasDL Eq. 6)."""
    return aggregators * batch_aggregator + (workers - aggregators) * batch_non_aggregator


def partition_sizes(samples: int, workers: int, aggregators: int, batch_aggregator: int,
                    batch_non_aggregator: int) -> list[int]:
    """Samples per worker, proportional to its batch (thesis Eq. 4-3/4-4, corrected).

    Aggregators get D^a = floor(D·B^a/B^g); the non-aggregators share the rest as evenly as
    possible, so the sizes always sum to D and every worker holds at least
    floor(D/B^g)·B_i samples, enough for the epoch's iterations.
    """
    batch = global_batch(workers, aggregators, batch_aggregator, batch_non_aggregator)
    per_aggregator = samples * batch_aggregator // batch
    sizes = [per_aggregator] * aggregators
    rest = samples - per_aggregator * aggregators
    receivers = workers - aggregators
    if receivers == 0:  # ScatterReduce: spread the remainder over the aggregators
        for index in range(rest):
            sizes[index % workers] += 1
        return sizes
    base, extra = divmod(rest, receivers)
    return sizes + [base + (1 if index < extra else 0) for index in range(receivers)]


SYNC_MODES: tuple[str, ...] = ("hap", "bsp")
OPTIMIZERS: tuple[str, ...] = ("sgd", "adamw")  # fasdl.training.optimizers
# The vectors each optimizer keeps per worker (checkpointed by name); the planner's memory
# model counts them, so they live here, where importing costs no torch.
OPTIMIZER_STATE: dict[str, tuple[str, ...]] = {"sgd": ("momentum",),
                                               "adamw": ("exp_avg", "exp_avg_sq")}
LR_SCHEDULES: tuple[str, ...] = ("constant", "cosine", "linear")
# HAP non-aggregator on merged l−1: re-apply its step, or the paper's (fasdl.exchange.kreduce)
HAP_MERGES: tuple[str, ...] = ("reapply", "paper")
# What uploaded shards carry (fasdl.exchange.codec): float32 values, or their bfloat16
# difference from the last merged model with error feedback (half the upload bytes)
EXCHANGE_DTYPES: tuple[str, ...] = ("float32", "bfloat16")
UPLOAD_BYTES_PER_VALUE: dict[str, int] = {"float32": 4, "bfloat16": 2}
# model-sized float32 vectors the codec keeps per worker (the last merged model, the residual)
EXCHANGE_STATE_MODELS: dict[str, int] = {"float32": 0, "bfloat16": 2}
MAX_EPOCHS = 100_000
MAX_EXCHANGE_CHUNKS = 1024
# Adaptive runs (planner/adapt): never re-plan; re-plan when a limit would be missed; also
# scale in when cheaper. "off" until the state machine runs the re-plan (issue 42).
ADAPTIVE_POLICIES: tuple[str, ...] = ("off", "deadline", "cost")


@dataclass(frozen=True)
class Training:
    """How a run proceeds: aggregators K, batch sizes B^a/B^n, epochs E, segment length, and
    the recipe: optimizer (``momentum`` for sgd, ``adam_*`` for adamw), a learning-rate
    schedule over global iterations (fasdl.training.optimizers) and input augmentation
    (fasdl.training.augment).
    """

    aggregators: int
    batch_aggregator: int
    batch_non_aggregator: int
    max_global_batch: int
    epochs: int
    segment_iterations: int
    sync: str = "hap"
    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    seed: int = 0
    optimizer: str = "sgd"
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    lr_schedule: str = "constant"
    warmup_iterations: int = 0
    augmentation: str = "none"
    # 1: the paper's K-REDUCE, one phase after another; C >= 2: the pipelined exchange
    # (fasdl.exchange.pipeline), every shard in C chunks, uploads and downloads overlapped
    exchange_chunks: int = 1
    exchange_dtype: str = "float32"
    # S3: the hashed key prefixes the exchange spreads its keys over (fasdl.contract.keys),
    # chosen by the planner to keep each within S3's per-prefix request rates; 1 on Valkey
    exchange_key_prefixes: int = 1
    # learning_rate is base_learning_rate scaled from base_batch to the global batch by
    # lr_scaling (fasdl.contract.lr_scaling); "none": as given (every plan before the rules)
    lr_scaling: str = "none"
    base_learning_rate: float | None = None
    base_batch: int | None = None
    # the warm-up ramps from this rate (0: from zero; Goyal et al.: from the base rate)
    warmup_start_learning_rate: float = 0.0
    hap_merge: str = "reapply"
    adaptive: str = "off"  # ADAPTIVE_POLICIES

    # written only off their defaults: older plans read and fit the trigger's 4 KB as before
    OMITTED_AT_DEFAULT = ("lr_scaling", "base_learning_rate", "base_batch",
                          "warmup_start_learning_rate", "hap_merge", "exchange_key_prefixes",
                          "adaptive")

    def validate(self, workers: int) -> None:
        require_int("training.aggregators", self.aggregators, 1, workers)
        require_int("training.batch_aggregator", self.batch_aggregator, 1, 1_000_000)
        require_int("training.batch_non_aggregator", self.batch_non_aggregator, 1, 1_000_000)
        require_int("training.max_global_batch", self.max_global_batch, 1, 100_000_000)
        require_int("training.epochs", self.epochs, 1, MAX_EPOCHS)
        require_int("training.segment_iterations", self.segment_iterations, 1, 10**9)
        require_choice("training.sync", self.sync, SYNC_MODES)
        require_choice("training.adaptive", self.adaptive, ADAPTIVE_POLICIES)
        require_float("training.learning_rate", self.learning_rate, 0.0, 10.0, open_low=True)
        require_float("training.momentum", self.momentum, 0.0, 1.0, open_high=True)
        require_float("training.weight_decay", self.weight_decay, 0.0, 1.0)
        require_int("training.seed", self.seed, 0, 2**32 - 1)
        require_int("training.exchange_chunks", self.exchange_chunks, 1, MAX_EXCHANGE_CHUNKS)
        require_choice("training.exchange_dtype", self.exchange_dtype, EXCHANGE_DTYPES)
        require_int("training.exchange_key_prefixes", self.exchange_key_prefixes, 1,
                    MAX_EXCHANGE_KEY_PREFIXES)
        self._validate_recipe()
        if self.aggregators < workers and self.batch_non_aggregator < self.batch_aggregator:
            raise PlanError(
                "training.batch_non_aggregator",
                f"must be >= batch_aggregator={self.batch_aggregator} when aggregators < workers "
                f"(non-aggregators do not aggregate, so they train the larger batch), "
                f"got {self.batch_non_aggregator}",
            )
        if self.aggregators == workers and self.batch_non_aggregator != self.batch_aggregator:
            raise PlanError(
                "training.batch_non_aggregator",
                f"must equal batch_aggregator={self.batch_aggregator} when aggregators == workers "
                f"(there are no non-aggregators), got {self.batch_non_aggregator}",
            )
        batch = global_batch(workers, self.aggregators, self.batch_aggregator,
                             self.batch_non_aggregator)
        if batch > self.max_global_batch:
            raise PlanError(
                "training.max_global_batch",
                f"global batch K*B^a + (W-K)*B^n = {batch} exceeds the cap "
                f"{self.max_global_batch}; allowed range is [1, {self.max_global_batch}]",
            )
        require_scaled_rate(self.lr_scaling, self.learning_rate, self.base_learning_rate,
                            self.base_batch, batch)

    def _validate_recipe(self) -> None:
        require_choice("training.optimizer", self.optimizer, OPTIMIZERS)
        require_float("training.adam_beta1", self.adam_beta1, 0.0, 1.0, open_high=True)
        require_float("training.adam_beta2", self.adam_beta2, 0.0, 1.0, open_high=True)
        require_float("training.adam_eps", self.adam_eps, 0.0, 1.0, open_low=True)
        require_choice("training.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        require_int("training.warmup_iterations", self.warmup_iterations, 0, 10**9)
        require_choice("training.augmentation", self.augmentation, AUGMENTATIONS)
        require_choice("training.hap_merge", self.hap_merge, HAP_MERGES)
        require_float("training.warmup_start_learning_rate", self.warmup_start_learning_rate,
                      0.0, 10.0)


# ---- an adaptive run's re-plan (replan/handler.py, infra/replan.py) -----------------------
# ``planner plan --adaptive`` writes the profiles the plan was made with beside it
# (``plan.json`` → ``plan.profiles.json``): plan.json names them only, and it rides in the
# trigger's 4 KB environment. The synth copies that file into the re-plan function's code as
# ``profiles.json`` and refuses an adaptive plan without it.
PROFILES_SUFFIX = ".profiles.json"
BUNDLED_PROFILES = "profiles.json"  # in the re-plan function's code, beside its packages
# Variables of the re-plan function alone (infra renders them, the handler reads them)
MEASURED_ON_ENV = "FASDL_MEASURED_ON"  # the platform a re-plan's measurements come from
CACHE_ECPU_MAX_ENV = "FASDL_CACHE_ECPU_MAX"  # the deployed cache's ECPU/s maximum (Valkey)
PROFILES_ENV = "FASDL_REPLAN_PROFILES"  # tests and local runs: another profiles file


def profiles_path(plan_path: Path) -> Path:
    """``plan.json`` → ``plan.profiles.json`` (any name: the suffix replaces ``.json``)."""
    name = plan_path.name.removesuffix(".json")
    return plan_path.with_name(name + PROFILES_SUFFIX)
