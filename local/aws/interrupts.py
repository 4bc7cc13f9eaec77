"""Ctrl-C (and SIGTERM) that no library can swallow.

Python raises KeyboardInterrupt wherever the main thread is when the signal arrives. While a
local run waits, that is mostly inside an in-process moto request, where the exception can end
up as an error response that botocore retries: the run then went on until its budget guard
stopped it (seen once in a clean-clone CI run of test_ctrl_c_stops_everything). :func:`install`
keeps Python's behaviour and remembers the signal; :func:`raise_if_interrupted` raises it again
where the run polls (local.aws.adapter.LocalStepFunctions.wait).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

_INTERRUPTED = threading.Event()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _INTERRUPTED.set()
    raise KeyboardInterrupt


def install() -> None:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt, and stay remembered (main thread only)."""
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt again if a signal came, whatever became of the first."""
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt
