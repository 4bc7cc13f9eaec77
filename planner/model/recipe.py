"""A workload's training recipe: the optimizer, learning-rate schedule and augmentation the
planner writes into the plan's ``training`` section.

A workload file may carry one (``"recipe": {...}``); each field can be overridden on the
command line (``--optimizer``, ``--learning-rate``, ...). The recipe also changes memory:
``c`` is measured with SGD's one momentum vector, and AdamW keeps two moment vectors, so it
adds one model size S_m to every worker (:meth:`Recipe.extra_state_mb`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace
from typing import Any

from fasdl.contract.fields import require_choice, require_float
from fasdl.contract.json_input import unknown_field_message
from fasdl.contract.plan import LR_SCHEDULES, OPTIMIZER_STATE, OPTIMIZERS, PlanError
from fasdl.contract.workload import AUGMENTATIONS

# command-line flag -> recipe field
FLAGS = {"--optimizer": "optimizer", "--learning-rate": "learning_rate",
         "--momentum": "momentum", "--weight-decay": "weight_decay",
         "--lr-schedule": "lr_schedule", "--warmup-fraction": "warmup_fraction",
         "--augmentation": "augmentation"}


@dataclass(frozen=True)
class Recipe:
    """How to train; ``warmup_fraction`` of the run's iterations warm the learning rate up."""

    optimizer: str = "sgd"
    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_schedule: str = "constant"
    warmup_fraction: float = 0.0
    augmentation: str = "none"

    def __post_init__(self) -> None:
        require_choice("recipe.optimizer", self.optimizer, OPTIMIZERS)
        require_float("recipe.learning_rate", self.learning_rate, 0.0, 10.0, open_low=True)
        require_float("recipe.momentum", self.momentum, 0.0, 1.0, open_high=True)
        require_float("recipe.weight_decay", self.weight_decay, 0.0, 1.0)
        require_choice("recipe.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        require_float("recipe.warmup_fraction", self.warmup_fraction, 0.0, 1.0)
        require_choice("recipe.augmentation", self.augmentation, AUGMENTATIONS)

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

    def training_fields(self, total_iterations: int) -> dict[str, Any]:
        """The plan's ``training`` fields this recipe sets, for a run of that length."""
        return {"optimizer": self.optimizer, "learning_rate": self.learning_rate,
                "momentum": self.momentum, "weight_decay": self.weight_decay,
                "lr_schedule": self.lr_schedule, "augmentation": self.augmentation,
                "warmup_iterations": round(self.warmup_fraction * total_iterations)}


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
