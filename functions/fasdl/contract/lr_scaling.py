"""How a recipe's learning rate follows the global batch: the rule the planner applies and the
plan checker re-computes, so a plan's ``training.learning_rate`` is exactly the rule's.

A recipe states the global batch its rate was tuned for (``base_batch``). With k = B^g /
base_batch:

* ``linear``: lr = base_lr · k, Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training
  ImageNet in 1 Hour" (https://arxiv.org/abs/1706.02677, §2.1 "Linear Scaling Rule"), with its
  gradual warm-up (§2.2: from base_lr up to k·base_lr over the first 5 epochs);
* ``sqrt``: lr = base_lr · √k, Krizhevsky 2014, "One weird trick for parallelizing
  convolutional neural networks" (https://arxiv.org/abs/1404.5997, §5), a gentler rule often
  used with adaptive optimizers;
* ``none``: lr = base_lr whatever the batch (what every plan did before the rules existed).

Pure Python: imported inside Lambda, by the planner and by the CDK app.
"""

from __future__ import annotations

import math

from fasdl.contract.fields import PlanError, require_choice, require_float, require_int

LR_SCALINGS: tuple[str, ...] = ("linear", "sqrt", "none")
# Goyal et al. §2.2 warm the rate up over 5 of 90 epochs
WARMUP_EPOCHS = 5


def scaled_learning_rate(base_learning_rate: float, global_batch: int, base_batch: int,
                         rule: str) -> float:
    """The rate ``rule`` gives at ``global_batch`` for a rate tuned at ``base_batch``."""
    if rule not in LR_SCALINGS:
        raise ValueError(f"lr scaling must be one of {', '.join(LR_SCALINGS)}, got {rule!r}")
    if rule == "none":
        return base_learning_rate
    ratio = global_batch / base_batch
    return base_learning_rate * (ratio if rule == "linear" else math.sqrt(ratio))


def require_scaled_rate(rule: object, learning_rate: float, base_learning_rate: object,
                        base_batch: object, global_batch: int) -> None:
    """A plan's ``training.learning_rate`` is what ``rule`` makes of its base rate at this
    global batch; under ``none`` the base fields are absent."""
    rule = require_choice("training.lr_scaling", rule, LR_SCALINGS)
    if rule == "none":
        for name, value in (("base_learning_rate", base_learning_rate),
                            ("base_batch", base_batch)):
            if value is not None:
                raise PlanError(f"training.{name}",
                                "is set only with training.lr_scaling linear or sqrt, got 'none'")
        return
    base = require_float("training.base_learning_rate", base_learning_rate, 0.0, 10.0,
                         open_low=True)
    tuned_at = require_int("training.base_batch", base_batch, 1, 100_000_000)
    expected = scaled_learning_rate(base, global_batch, tuned_at, rule)
    if not math.isclose(learning_rate, expected, rel_tol=1e-9):
        raise PlanError("training.learning_rate",
                        f"must be {expected!r}: {rule} scaling of base_learning_rate {base!r} "
                        f"from base_batch {tuned_at} to the global batch {global_batch}, "
                        f"got {learning_rate!r}")
