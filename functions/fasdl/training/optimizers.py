"""A worker's local optimizer over the flat parameter vector, and the learning-rate schedule.

Each worker keeps its own optimizer state and steps once per iteration before the exchange
(fasdl.exchange.kreduce). The state is a set of named vectors laid out like the parameters, so a
checkpoint stores each exactly as it stores the model:

* ``sgd``: torch.optim.SGD's arithmetic (dampening 0, no Nesterov) with one ``momentum``
  vector. Model averaging after it equals large-batch SGD under bsp (fasdl.exchange.kreduce).
* ``adamw``: torch.optim.AdamW's arithmetic with ``exp_avg`` and ``exp_avg_sq``. Adam is not
  linear in the gradient, so averaging is local Adam plus model averaging, not large-batch
  Adam; what it converges to is measured in bench/convergence.py.

The learning rate is a pure function of the global iteration (linear warm-up, then constant,
cosine or linear decay to zero over the run), and Adam's bias correction counts global
iterations too, so segment boundaries and restarts never change a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import nn

from fasdl.contract.plan import OPTIMIZER_STATE, Plan, Training


class FlatParameters:
    """A model's parameters as views into one contiguous float32 buffer.

    Flattened once: afterwards the sharding and the averaging work on one vector with no
    per-step gather/scatter copies. Gradients stay autograd's own per-parameter tensors:
    binding them to views of a flat buffer too would make autograd accumulate in place
    (zero + read-add-write every step), which measured slower (docs/results.md,
    "Measurements behind design choices").
    """

    def __init__(self, model: nn.Module) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("model has no trainable parameters")
        for param in self.params:
            if param.dtype != torch.float32:
                raise TypeError(f"K-REDUCE exchanges float32 parameters, got {param.dtype}")
        with torch.no_grad():
            self.values = nn.utils.parameters_to_vector(self.params).detach()  # a fresh copy
        self.count = self.values.numel()
        for param, view in zip(self.params, self.views_of(self.values), strict=True):
            param.data = view

    def views_of(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter views of a vector laid out like :attr:`values`."""
        views: list[torch.Tensor] = []
        offset = 0
        for param in self.params:
            views.append(flat[offset:offset + param.numel()].view_as(param))
            offset += param.numel()
        return views

    def numpy(self) -> np.ndarray:
        """The parameter vector as a numpy view (writes go straight into the model)."""
        return self.values.numpy()


@dataclass(frozen=True)
class LearningRateSchedule:
    """lr(l) for global iteration l of ``total`` iterations.

    Warm-up: start + (lr − start)·(l+1)/warmup for l < warmup (start 0, or Goyal et al.'s
    unscaled rate when the plan scaled lr up: fasdl.contract.lr_scaling). After it, with
    p = (l − warmup)/(total − warmup): ``constant`` lr; ``cosine`` lr·½(1 + cos πp);
    ``linear`` lr·(1 − p).
    """

    base: float
    kind: str = "constant"
    warmup: int = 0
    total: int = 1
    start: float = 0.0

    @classmethod
    def for_plan(cls, plan: Plan) -> LearningRateSchedule:
        t = plan.training
        return cls(t.learning_rate, t.lr_schedule, t.warmup_iterations, plan.total_iterations,
                   t.warmup_start_learning_rate)

    def __call__(self, iteration: int) -> float:
        if iteration < self.warmup:  # start 0.0 gives lr·(l+1)/warmup's bits exactly
            return self.start + (self.base - self.start) * (iteration + 1) / self.warmup
        if self.kind == "constant":
            return self.base
        progress = min(1.0, (iteration - self.warmup) / max(1, self.total - self.warmup))
        if self.kind == "cosine":
            return self.base * 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.base * (1.0 - progress)


class FlatOptimizer(Protocol):
    """What a worker needs of its optimizer."""

    state: dict[str, torch.Tensor]

    def zero_grad(self) -> None: ...

    def step(self, iteration: int) -> None: ...

    def reapply(self, iteration: int) -> None: ...


class _FlatBase:
    def __init__(self, flat: FlatParameters, schedule: LearningRateSchedule,
                 weight_decay: float, names: tuple[str, ...]) -> None:
        self.flat = flat
        self.schedule = schedule
        self.weight_decay = weight_decay
        self.state = {name: torch.zeros_like(flat.values) for name in names}
        self._views = {name: flat.views_of(vector) for name, vector in self.state.items()}

    def zero_grad(self) -> None:
        for param in self.flat.params:
            param.grad = None  # autograd then hands over fresh gradients, no accumulation

    def _with_grads(self) -> tuple[list[int], list[torch.Tensor], list[torch.Tensor]]:
        used = [i for i, p in enumerate(self.flat.params) if p.grad is not None]
        params: list[torch.Tensor] = [self.flat.params[i] for i in used]
        return used, params, [p.grad for p in params if p.grad is not None]


class FlatSGD(_FlatBase):
    """torch.optim.SGD (dampening 0, no Nesterov), same arithmetic, flat momentum buffer."""

    def __init__(self, flat: FlatParameters, schedule: LearningRateSchedule, momentum: float,
                 weight_decay: float) -> None:
        super().__init__(flat, schedule, weight_decay, OPTIMIZER_STATE["sgd"])
        self.momentum = momentum

    @torch.no_grad()
    def step(self, iteration: int) -> None:
        used, params, direction = self._with_grads()
        if self.weight_decay:
            direction = list(torch._foreach_add(direction, params, alpha=self.weight_decay))
        if self.momentum:
            # buffer starts at zero, so the first step gives buffer = grad exactly
            buffers = [self._views["momentum"][i] for i in used]
            torch._foreach_mul_(buffers, self.momentum)
            torch._foreach_add_(buffers, direction)
            direction = buffers
        torch._foreach_add_(params, direction, alpha=-self.schedule(iteration))

    @torch.no_grad()
    def reapply(self, iteration: int) -> None:
        """The update of :meth:`step` again, at the parameters now; the state is unchanged.

        With momentum that is −lr·buffer (the buffer holds the step's direction); without,
        −lr·(g + wd·θ) with the step's gradient and today's θ.
        """
        used, params, grads = self._with_grads()
        direction: list[torch.Tensor] = [self._views["momentum"][i] for i in used]
        if not self.momentum:
            direction = (list(torch._foreach_add(grads, params, alpha=self.weight_decay))
                         if self.weight_decay else grads)
        torch._foreach_add_(params, direction, alpha=-self.schedule(iteration))


class FlatAdamW(_FlatBase):
    """torch.optim.AdamW, same arithmetic; step t = global iteration + 1 for bias correction."""

    def __init__(self, flat: FlatParameters, schedule: LearningRateSchedule,
                 betas: tuple[float, float], eps: float, weight_decay: float) -> None:
        super().__init__(flat, schedule, weight_decay, OPTIMIZER_STATE["adamw"])
        self.beta1, self.beta2 = betas
        self.eps = eps

    @torch.no_grad()
    def step(self, iteration: int) -> None:
        used, params, grads = self._with_grads()
        exp_avg = [self._views["exp_avg"][i] for i in used]
        exp_avg_sq = [self._views["exp_avg_sq"][i] for i in used]
        torch._foreach_lerp_(exp_avg, grads, 1.0 - self.beta1)
        torch._foreach_mul_(exp_avg_sq, self.beta2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, 1.0 - self.beta2)
        self._update(iteration, params, exp_avg, exp_avg_sq)

    @torch.no_grad()
    def reapply(self, iteration: int) -> None:
        """The update of :meth:`step` again, at the parameters now (decay of today's θ and
        the moments the step left); the moments are unchanged."""
        used, params, _ = self._with_grads()
        self._update(iteration, params, [self._views["exp_avg"][i] for i in used],
                     [self._views["exp_avg_sq"][i] for i in used])

    def _update(self, iteration: int, params: list[torch.Tensor], exp_avg: list[torch.Tensor],
                exp_avg_sq: list[torch.Tensor]) -> None:
        """Decoupled weight decay, then the bias-corrected moment step (the moments as they
        are); the denominator is the one model-sized temporary, as in torch's AdamW."""
        lr, t = self.schedule(iteration), iteration + 1
        if self.weight_decay:
            torch._foreach_mul_(params, 1.0 - lr * self.weight_decay)
        step_size = lr / (1.0 - self.beta1 ** t)
        denominator = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_div_(denominator, math.sqrt(1.0 - self.beta2 ** t))
        torch._foreach_add_(denominator, self.eps)
        torch._foreach_addcdiv_(params, exp_avg, denominator, -step_size)


def build_optimizer(flat: FlatParameters, plan: Plan) -> FlatSGD | FlatAdamW:
    """The plan's optimizer over ``flat`` with the plan's schedule."""
    t: Training = plan.training
    schedule = LearningRateSchedule.for_plan(plan)
    if t.optimizer == "adamw":
        return FlatAdamW(flat, schedule, (t.adam_beta1, t.adam_beta2), t.adam_eps,
                         t.weight_decay)
    return FlatSGD(flat, schedule, t.momentum, t.weight_decay)
