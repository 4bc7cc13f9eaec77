"""Make torch importable for a handler, on its first invocation (nothing heavy at import).

Order: torch already importable (tests, local runs, the container image) → use it; the
function was synthesized with the stand-in layer (``FASDL_TORCH_LAYER_STUB=1``) → report a
clear problem instead of an ImportError deep inside a module; otherwise the real layer's
``fasdl_torch_loader.ensure_torch()`` unpacks torch into /tmp once per sandbox.

Why not at module import (Lambda's init phase): on-demand init is limited to 10 s, and when it
does not finish Lambda retries it at the first invocation under the function timeout
(https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html). Unpacking
and importing torch at M/1769 vCPU takes far longer than that at small M (measured:
docs/cold-start.md, bench/cold_start.py). So handlers call :func:`load_torch` at the start of
each invocation: the first one in a sandbox pays the unpack + import and reports its time, later
ones get the cached result for free.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import threading
import time
from dataclasses import dataclass

from fasdl.contract.settings import Settings


class TorchUnavailable(RuntimeError):
    """torch cannot be loaded in this function."""


@dataclass(frozen=True)
class TorchLoad:
    """How this sandbox got torch: once per sandbox, then cached."""

    problem: str | None  # None: ``import torch`` works
    outcome: str  # importable | installed | reused | discarded (the loader's) | unavailable
    seconds: float  # wall time of the unpack + import, paid by the first invocation only
    fresh: bool = True  # this call did the work (log and meter it); False: cached

    def check(self) -> None:
        """Raise :class:`TorchUnavailable` with the reason when torch cannot be loaded."""
        if self.problem is not None:
            raise TorchUnavailable(self.problem)

    def log_fields(self) -> dict[str, object]:
        return {"torch_load_s": round(self.seconds, 3), "torch_load_outcome": self.outcome}


_lock = threading.Lock()  # Lambda runs one invocation at a time; local tests use threads
_loaded: TorchLoad | None = None


def _prepare() -> tuple[str | None, str]:
    """(problem, outcome): the problem is None when ``import torch`` will work."""
    if importlib.util.find_spec("torch") is not None:
        return None, "importable"
    if Settings.read_one("torch_layer_stub") == "1":
        return ("this function was deployed with the stand-in torch layer "
                "(FASDL_TORCH_LAYER_STUB=1): build the real layer with `make layer` and "
                "deploy again"), "unavailable"
    try:
        loader = importlib.import_module("fasdl_torch_loader")
        loader.ensure_torch()
    except Exception as error:  # reported on every invocation, with the cause
        return f"the torch layer could not be loaded: {error!r}", "unavailable"
    result = getattr(loader, "last_result", None)
    return None, str(getattr(result, "outcome", "installed"))


def prepare_torch() -> str | None:
    """None when ``import torch`` will work, else why it will not (unpacks the layer if
    needed; does not import torch)."""
    return _prepare()[0]


def load_torch() -> TorchLoad:
    """Prepare and import torch once per sandbox; later calls return the cached result at no
    cost (``fresh=False``). A failure is cached too: the sandbox cannot recover from it."""
    global _loaded
    with _lock:
        if _loaded is not None:
            return dataclasses.replace(_loaded, fresh=False)
        started = time.monotonic()
        problem, outcome = _prepare()
        if problem is None:
            try:
                importlib.import_module("torch")
            except (ImportError, OSError) as error:
                problem, outcome = f"torch could not be imported: {error!r}", "unavailable"
        _loaded = TorchLoad(problem, outcome, time.monotonic() - started)
        return _loaded


def reset_for_tests() -> None:
    """Forget the cached load (a new sandbox), for tests."""
    global _loaded
    with _lock:
        _loaded = None
