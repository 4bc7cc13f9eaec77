"""Make torch importable before a handler imports it (no torch import here).

Order: torch already importable (tests, local runs, the container image) → use it; the
function was synthesized with the stand-in layer (``FASDL_TORCH_LAYER_STUB=1``) → report a
clear problem instead of an ImportError deep inside a module; otherwise the real layer's
``fasdl_torch_loader.ensure_torch()`` unpacks torch into /tmp once per sandbox. Handlers call
:func:`prepare_torch` at module import so the unpack runs in the Lambda init phase.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

STUB_ENV = "FASDL_TORCH_LAYER_STUB"


class TorchUnavailable(RuntimeError):
    """torch cannot be loaded in this function."""


def prepare_torch() -> str | None:
    """None when ``import torch`` will work, else why it will not."""
    if importlib.util.find_spec("torch") is not None:
        return None
    if os.environ.get(STUB_ENV) == "1":
        return ("this function was deployed with the stand-in torch layer "
                "(FASDL_TORCH_LAYER_STUB=1): build the real layer with `make layer` and "
                "deploy again")
    try:
        loader = importlib.import_module("fasdl_torch_loader")
        loader.ensure_torch()
    except Exception as error:  # reported on every invocation, with the cause
        return f"the torch layer could not be loaded: {error!r}"
    return None
