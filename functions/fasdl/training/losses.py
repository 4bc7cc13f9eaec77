"""The training loss a workload names (fasdl.contract.workload ``loss``), as ``loss(logits,
labels)`` with integer class labels: cross-entropy, or mean squared error and binary
cross-entropy on one-hot targets, or the user's own ``file.py:function`` (a factory called once
with no arguments, returning the loss module)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from fasdl.contract.user_code import UserCodeError
from fasdl.contract.workload import Workload
from fasdl.training.user_code import check_signature, load_function

# Any, as nn.Module calls are: torch types backward() loosely
Loss = Callable[[torch.Tensor, torch.Tensor], Any]


class _OneHot(nn.Module):
    """A loss on logits against the labels' one-hot vectors (the logits' dtype)."""

    def __init__(self, loss: nn.Module) -> None:
        super().__init__()
        self.loss = loss

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        targets = functional.one_hot(labels, logits.shape[1]).to(logits.dtype)
        result: torch.Tensor = self.loss(logits, targets)
        return result


def build_loss(workload: Workload) -> Loss:
    if workload.loss_ref.code is not None:
        factory = load_function(workload.loss_ref, "workload.loss")
        check_signature(factory, (), "workload.loss", "function() -> torch.nn.Module")
        loss = factory()
        if not callable(loss):
            raise UserCodeError("workload.loss", f"{workload.loss} returned "
                                                 f"{type(loss).__name__}, not a callable "
                                                 f"loss(logits, labels)")
        return loss  # type: ignore[no-any-return]
    if workload.loss == "mse":
        return _OneHot(nn.MSELoss())
    if workload.loss == "bce":
        return _OneHot(nn.BCEWithLogitsLoss())
    return nn.CrossEntropyLoss()
