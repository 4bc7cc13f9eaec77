"""Start a run from the user's weights (``workload.initial_weights``, a safetensors file in the
datasets bucket): every worker loads the same file into its freshly built model before
iteration 0, so fine-tuning starts where the file says, on every worker alike."""

from __future__ import annotations

import torch
from torch import nn

from fasdl.training.safetensors_io import SafetensorsError, load

FIELD = "workload.initial_weights"


class InitialWeightsError(ValueError):
    """The file does not fit the model; the message names the field and the entry."""


def apply_initial_weights(model: nn.Module, data: bytes, source: str) -> None:
    """Load ``data`` into ``model``: every parameter and buffer by name, each of the model's
    shape (cast to the model's dtype), nothing missing and nothing extra."""
    try:
        tensors, _ = load(data)
    except SafetensorsError as error:
        raise InitialWeightsError(f"{FIELD}: {source}: {error}") from error
    state = model.state_dict()
    missing, extra = sorted(set(state) - set(tensors)), sorted(set(tensors) - set(state))
    if missing or extra:
        raise InitialWeightsError(
            f"{FIELD}: {source} does not fit the model: "
            + "; ".join(f"{what} {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
                        for what, names in (("missing", missing), ("not in the model", extra))
                        if names))
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(state[name].shape):
            raise InitialWeightsError(f"{FIELD}: {source}: {name} has shape "
                                      f"{list(tensor.shape)}, the model's is "
                                      f"{list(state[name].shape)}")
    with torch.no_grad():
        model.load_state_dict({name: tensor.to(state[name].dtype)
                               for name, tensor in tensors.items()}, strict=True)
