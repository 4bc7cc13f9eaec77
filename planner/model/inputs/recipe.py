"""A workload's training recipe: the optimizer, learning-rate schedule and augmentation the
planner writes into the plan's ``training`` section.

A workload file may carry one (``"recipe": {...}``); each field can be overridden on the
command line (``--optimizer``, ``--learning-rate``, ...). The recipe also changes memory:
``c`` is measured with SGD's one momentum vector, and AdamW keeps two moment vectors, so it
adds one model size S_m to every worker (:meth:`Recipe.extra_state_mb`).

The learning rate is the one tuned at the recipe's ``base_batch`` (a global batch). The plan
scales it to its own global batch by ``lr_scaling`` (fasdl.contract.lr_scaling): ``linear``
by default, Goyal et al. 2017 (https://arxiv.org/abs/1706.02677), whose gradual warm-up goes
with it when the rate grows: from the base rate up to the scaled one over the first
``WARMUP_EPOCHS`` epochs, at most a quarter of the run so a short run still trains at the
scaled rate. A recipe without ``base_batch`` is not scaled, and the plan says so.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace
from typing import Any

from fasdl.contract.fields import require_choice, require_float, require_int
from fasdl.contract.json_input import unknown_field_message
from fasdl.contract.lr_scaling import LR_SCALINGS, WARMUP_EPOCHS, scaled_learning_rate
from fasdl.contract.plan import (
    HAP_MERGES,
    LR_SCHEDULES,
    OPTIMIZER_STATE,
    OPTIMIZERS,
    PlanError,
    Training,
)
from fasdl.contract.workload import AUGMENTATIONS

# command-line flag -> recipe field
FLAGS = {"--optimizer": "optimizer", "--learning-rate": "learning_rate",
         "--momentum": "momentum", "--weight-decay": "weight_decay",
         "--lr-schedule": "lr_schedule", "--warmup-fraction": "warmup_fraction",
         "--augmentation": "augmentation", "--lr-scaling": "lr_scaling",
         "--base-batch": "base_batch", "--hap-merge": "hap_merge"}
WARMUP_MAX_SHARE = 0.25  # of the run's iterations, for the scaling's warm-up


@dataclass(frozen=True)
class Recipe:
    """How to train; ``warmup_fraction`` of the run's iterations warm the learning rate up;
    ``learning_rate`` was tuned at global batch ``base_batch`` (None: not stated)."""

    optimizer: str = "sgd"
    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_schedule: str = "constant"
    warmup_fraction: float = 0.0
    augmentation: str = "none"
    base_batch: int | None = None
    lr_scaling: str = "linear"
    hap_merge: str = "reapply"

    def __post_init__(self) -> None:
        require_choice("recipe.optimizer", self.optimizer, OPTIMIZERS)
        require_float("recipe.learning_rate", self.learning_rate, 0.0, 10.0, open_low=True)
        require_float("recipe.momentum", self.momentum, 0.0, 1.0, open_high=True)
        require_float("recipe.weight_decay", self.weight_decay, 0.0, 1.0)
        require_choice("recipe.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        require_float("recipe.warmup_fraction", self.warmup_fraction, 0.0, 1.0)
        require_choice("recipe.augmentation", self.augmentation, AUGMENTATIONS)
        if self.base_batch is not None:
            require_int("recipe.base_batch", self.base_batch, 1, 100_000_000)
        require_choice("recipe.lr_scaling", self.lr_scaling, LR_SCALINGS)
        require_choice("recipe.hap_merge", self.hap_merge, HAP_MERGES)

    @classmethod
    def from_value(cls, value: object) -> Recipe:
        """A workload file's ``recipe`` object (or a Recipe already)."""
        if isinstance(value, Recipe):
            return value
        if not isinstance(value, dict):
            raise PlanError("recipe", f"must be a JSON object, got {type(value).__name__}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise PlanError(f"recipe.{unknown[0]}", unknown_field_message(unknown[0], known))
        return cls(**value)

    def extra_state_mb(self, model_mb: float) -> float:
        """Optimizer memory beyond the one vector ``c`` includes (AdamW: + S_m)."""
        return (len(OPTIMIZER_STATE[self.optimizer]) - 1) * model_mb

    def with_flags(self, args: argparse.Namespace) -> Recipe:
        """This recipe with the command line's overrides (None: not given)."""
        given = {field: getattr(args, field) for field in FLAGS.values()
                 if getattr(args, field, None) is not None}
        return replace(self, **given)

    def training_fields(self, global_batch: int, iterations_per_epoch: int,
                        total_iterations: int) -> dict[str, Any]:
        """The plan's ``training`` fields this recipe sets for a run of that global batch
        and length: the rate scaled to the batch, and the warm-up that goes with it."""
        chosen: dict[str, Any] = {
            "optimizer": self.optimizer, "learning_rate": self.learning_rate,
            "momentum": self.momentum, "weight_decay": self.weight_decay,
            "lr_schedule": self.lr_schedule, "augmentation": self.augmentation,
            "warmup_iterations": round(self.warmup_fraction * total_iterations),
            "hap_merge": self.hap_merge}
        if self.base_batch is None or self.lr_scaling == "none":
            return chosen
        rate = scaled_learning_rate(self.learning_rate, global_batch, self.base_batch,
                                    self.lr_scaling)
        chosen.update(learning_rate=rate, lr_scaling=self.lr_scaling,
                      base_learning_rate=self.learning_rate, base_batch=self.base_batch)
        if rate > self.learning_rate:  # Goyal et al. §2.2: warm up from the base rate
            scaling_warmup = min(WARMUP_EPOCHS * iterations_per_epoch,
                                 int(WARMUP_MAX_SHARE * total_iterations))
            if scaling_warmup > chosen["warmup_iterations"]:
                # a recipe's own warm-up (from zero) is the gentler one where it is longer
                chosen["warmup_iterations"] = scaling_warmup
                chosen["warmup_start_learning_rate"] = self.learning_rate
        return chosen


def describe_learning_rate(training: Training) -> str:
    """The plan's learning-rate line: the rate the runtime uses and where it came from."""
    t = training
    if t.warmup_iterations:
        start = f"{t.warmup_start_learning_rate:g}" if t.warmup_start_learning_rate else "0"
        warmup = f", warm-up over {t.warmup_iterations} iterations from {start}"
    else:
        warmup = ", no warm-up"
    if t.lr_scaling == "none":
        return (f"  learning rate {t.learning_rate:g} as given{warmup} (not scaled with the "
                "global batch: the recipe states no base_batch, or --lr-scaling none)")
    return (f"  learning rate {t.learning_rate:g}: {t.lr_scaling} scaling of "
            f"{t.base_learning_rate:g} tuned at global batch {t.base_batch}{warmup}")


def add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that override the workload's recipe."""
    group = parser.add_argument_group("training recipe (default: the workload file's)")
    group.add_argument("--optimizer", choices=OPTIMIZERS)
    group.add_argument("--learning-rate", type=float, help="base learning rate (0-10]")
    group.add_argument("--momentum", type=float, help="SGD momentum [0, 1)")
    group.add_argument("--weight-decay", type=float, help="weight decay [0, 1]")
    group.add_argument("--lr-schedule", choices=LR_SCHEDULES,
                       help="after the warm-up: constant, or cosine/linear decay to 0")
    group.add_argument("--warmup-fraction", type=float,
                       help="share of the run's iterations that warm the rate up [0, 1]")
    group.add_argument("--augmentation", choices=AUGMENTATIONS,
                       help="cifar: padded random crop, flip, channel normalisation")
    group.add_argument("--base-batch", type=int,
                       help="the global batch the learning rate was tuned at [1, 1e8]")
    group.add_argument("--lr-scaling", choices=LR_SCALINGS,
                       help="how the rate follows the global batch (default linear, with "
                            "Goyal et al.'s warm-up; needs a base batch)")
    group.add_argument("--hap-merge", choices=HAP_MERGES,
                       help="a HAP non-aggregator on the stale merged model: reapply its "
                            "own step (default) or paper (FasDL's merge, as it is)")
