"""The cost marks, applied and enforced: a pytest plugin that tests/conftest.py loads.

Applied: at collection each test gets the marks tests/costs.py gives its path and fixtures
(and ``e2e`` for the old ``slow``). Enforced: while a test runs (its setup, call or teardown,
in every xdist worker) each process started through ``subprocess.Popen``, each moto
``ThreadedMotoServer`` and each call into jsii (in-process ``aws_cdk``) is checked against the
test's marks; a missing mark fails that phase with a message naming the test, the command and
the mark. Nothing is attributed outside a test (collection, imports, between tests).

``FASDL_COST_AUDIT=FILE`` logs every check as a JSON line instead of failing: what a new test
starts, and so which marks it needs.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests import costs

TESTS = Path(costs.__file__).resolve().parent
AUDIT_ENV = "FASDL_COST_AUDIT"
# jsii bookkeeping, not work done for a test: loading an assembly happens at import
_JSII_IGNORED = {"LoadRequest", "DeleteRequest", "StatsRequest"}


def marks_for(item: pytest.Item) -> set[str]:
    """The cost marks a test gets from the table, its fixtures and the aliases."""
    found: set[str] = set()
    path = Path(str(item.path)).resolve()
    if path.is_relative_to(TESTS):
        found |= costs.marks_of_path(f"{path.relative_to(TESTS).as_posix()}::{item.name}")
    for fixture in getattr(item, "fixturenames", ()):
        found.update(costs.FIXTURES.get(fixture, ()))
    for alias, mark in costs.ALIASES.items():
        if item.get_closest_marker(alias) is not None:
            found.add(mark)
    return found


class Watch:
    """The test running now (one per process) and the marks its starts lacked."""

    def __init__(self, audit: str | None) -> None:
        self.item: pytest.Item | None = None
        self.phase = ""
        self.audit = audit
        self.missing: dict[tuple[str, str], list[str]] = {}
        self._seen: set[tuple[str, str, str, str]] = set()
        self._lock = threading.Lock()

    def started(self, mark: str, what: str, command: str) -> None:
        item, phase = self.item, self.phase
        if item is None:
            return
        key = (item.nodeid, phase, mark, command)
        with self._lock:
            if key in self._seen:  # jsii: thousands of calls per synth, one check
                return
            self._seen.add(key)
        marked = item.get_closest_marker(mark) is not None
        if self.audit:
            line = {"test": item.nodeid, "phase": phase, "mark": mark, "what": what,
                    "command": command, "marked": marked}
            with self._lock, open(self.audit, "a") as log:
                log.write(json.dumps(line) + "\n")
            return
        if not marked:
            message = (f"{item.nodeid} started {what} in its {phase} without the mark "
                       f"`{mark}`:\n    {command}\nGive the test the mark in tests/costs.py "
                       f"(PATHS or FIXTURES) or with @pytest.mark.{mark} "
                       f"(docs/development.md, \"Lint and tests\").")
            with self._lock:
                self.missing.setdefault((item.nodeid, phase), []).append(message)

    def take(self, nodeid: str, phase: str) -> list[str]:
        with self._lock:
            return self.missing.pop((nodeid, phase), [])


def _argv(args: Any, shell: bool) -> list[str]:
    if isinstance(args, str | bytes | os.PathLike):
        text = os.fsdecode(args)
        return ["sh", "-c", text] if shell else [text]
    return [os.fsdecode(arg) for arg in args]


def _short(argv: Sequence[str]) -> str:
    text = " ".join(argv)
    return text if len(text) <= 300 else f"{text[:297]}..."


def _install(watch: Watch) -> Callable[[], None]:
    """Wrap Popen, moto's server and jsii's kernel channel; returns what undoes it."""
    from jsii._kernel.providers.process import _NodeProcess
    from moto.server import ThreadedMotoServer

    popen_init, moto_start, jsii_send = (subprocess.Popen.__init__, ThreadedMotoServer.start,
                                         _NodeProcess.send)

    def watched_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        popen_init(self, args, *rest, **kwargs)
        argv = _argv(args, bool(kwargs.get("shell")))
        cost = costs.command_cost(argv)
        for mark in cost[0] if cost else ():
            watch.started(mark, cost[1], _short(argv))

    def watched_moto(self: ThreadedMotoServer) -> None:
        watch.started(costs.SERVERS, "a moto server", "moto.server.ThreadedMotoServer.start")
        moto_start(self)

    def watched_send(self: _NodeProcess, request: Any, response_type: Any) -> Any:
        if type(request).__name__ not in _JSII_IGNORED:
            watch.started(costs.SYNTH, "in-process aws_cdk",
                          "calls into jsii's node kernel (aws_cdk constructs, synth, assertions)")
        return jsii_send(self, request, response_type)

    subprocess.Popen.__init__ = watched_init  # type: ignore[method-assign]
    ThreadedMotoServer.start = watched_moto  # type: ignore[method-assign]
    _NodeProcess.send = watched_send  # type: ignore[method-assign]

    def undo() -> None:
        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
        ThreadedMotoServer.start = moto_start  # type: ignore[method-assign]
        _NodeProcess.send = jsii_send  # type: ignore[method-assign]

    return undo


WATCH = Watch(os.environ.get(AUDIT_ENV) or None)


def pytest_configure(config: pytest.Config) -> None:
    config.add_cleanup(_install(WATCH))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Before ``-m`` deselects: the selection sees the table's marks."""
    for item in items:
        for mark in sorted(marks_for(item)):
            if item.get_closest_marker(mark) is None:
                item.add_marker(mark)


@contextmanager
def _during(item: pytest.Item, phase: str) -> Iterator[None]:
    WATCH.item, WATCH.phase = item, phase
    try:
        yield
    finally:
        WATCH.item, WATCH.phase = None, ""


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _during(item, "setup"):
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _during(item, "call"):
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    with _during(item, "teardown"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report: pytest.TestReport = yield
    found = WATCH.take(item.nodeid, call.when)
    if found:
        message = "\n\n".join(found)
        if report.failed:  # keep the test's own failure, add the cost one
            report.sections.append(("cost marks", message))
        else:
            report.outcome = "failed"
            report.longrepr = message
            if hasattr(report, "wasxfail"):
                del report.wasxfail
    return report
