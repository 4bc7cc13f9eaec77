"""A Ctrl-C that a library swallowed is raised again at the run's next poll
(local.aws.interrupts)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from local.aws import interrupts


@pytest.fixture
def installed() -> Iterator[None]:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    interrupts.install()
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        interrupts._INTERRUPTED.clear()  # this process goes on with the other tests


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_swallowed_interrupt_is_raised_again(sig: signal.Signals) -> None:
    interrupts.raise_if_interrupted()  # nothing came yet
    swallowed = False
    try:  # as a library that turns any exception inside a request into an error response
        os.kill(os.getpid(), sig)  # the handler runs at the next bytecode of this thread
    except BaseException:  # the library's behaviour under test
        swallowed = True
    assert swallowed
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_if_interrupted()
