"""The child process of emulated Lambda invocations (see local/lambda_/emulator.py,
local/lambda_/sandbox.py).

``python -m local.lambda_.invoke --serve HANDLER`` is a warm sandbox: it imports ``HANDLER`` once
(the Init phase), then serves one invocation per JSON line on stdin (``event``, ``result``,
``request_id``, ``deadline_ms``, ``log``: its output goes to that file) and answers ``done`` on
the pipe named by ``FASDL_LOCAL_CONTROL_FD`` once the result is written; module state
survives between invocations.

``python -m local.lambda_.invoke HANDLER EVENT_FILE RESULT_FILE REQUEST_ID`` serves one and exits.
Each imports ``HANDLER``
(``module.function``, resolved from the function's code dir on ``PYTHONPATH``), calls it with
the event and a Lambda-like context, and writes ``{"result": ...}`` or ``{"errorType": ...,
"errorMessage": ..., "stackTrace": [...]}`` to RESULT_FILE. The result goes to a file, not
stdout, so whatever the handler prints stays in the invocation's log. Only the standard library
is imported here: the handler's own imports must come from its code dir. The one exception is
Lambda emulation: with ``FASDL_LOCAL_SHAPING`` set, local.lambda_.lambda_speed (fasdl, planner) is
imported to shape the handler's channels before the handler is loaded.

RESULT_FILE also carries this process's peak resident set (``VmHWM``, key
:data:`PEAK_RSS_KEY`): the parent samples memory every few ms and would miss a peak reached
after its last sample; the parent removes the key before the payload goes anywhere. A handler
that crashes writes no RESULT_FILE, so the peak before the call (Python, the Init's imports)
also goes to :func:`peak_file` first: a crash quicker than the parent's first sample of the
started interpreter still reports what it held.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from local.lambda_.sandbox_env import SHAPING_ENV

DEADLINE_ENV = "FASDL_LOCAL_DEADLINE_MS"  # epoch ms at which the parent kills this process
PEAK_RSS_KEY = "__localPeakRssKb"  # in RESULT_FILE: this process's VmHWM in kB


def peak_file(result_file: Path) -> Path:
    """Where the child writes its VmHWM (kB) before calling the handler."""
    return result_file.with_suffix(".peak")


def peak_before_call_kb(result_file: Path) -> int:
    """What :func:`peak_file` holds; 0 when the child never got that far."""
    try:
        return int(peak_file(result_file).read_text())
    except (OSError, ValueError):
        return 0


class LambdaContext:
    """The attributes and method of the Lambda Python runtime's context that handlers use."""

    def __init__(self, request_id: str, environ: dict[str, str]) -> None:
        self.aws_request_id = request_id
        self.function_name = environ.get("AWS_LAMBDA_FUNCTION_NAME", "function")
        self.function_version = environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = int(environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        region = environ.get("AWS_REGION", "us-east-1")
        self.invoked_function_arn = (
            f"arn:aws:lambda:{region}:123456789012:function:{self.function_name}")
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = f"local/{request_id}"
        self._deadline_ms = int(environ.get(DEADLINE_ENV, "0"))

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def _error(error_type: str, message: str, stack: list[str] | None = None) -> dict[str, Any]:
    return {"errorType": error_type, "errorMessage": message, "stackTrace": stack or []}


def _load(handler: str) -> Callable[..., Any] | dict[str, Any]:
    module_name, _, function_name = handler.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # Lambda reports any import failure this way
        return _error("Runtime.ImportModuleError",
                      f"Unable to import module '{module_name}': {error}",
                      traceback.format_exception(error))
    function = getattr(module, function_name, None)
    if not callable(function):
        return _error("Runtime.HandlerNotFound",
                      f"Handler '{function_name}' missing on module '{module_name}'")
    return function  # type: ignore[no-any-return]


CONTROL_FD_ENV = "FASDL_LOCAL_CONTROL_FD"  # a warm sandbox's answer pipe to the emulator
DONE = b"done\n"


def _init(handler: str) -> Callable[..., Any] | dict[str, Any]:
    """The Init phase: shaping, then the handler's module."""
    shaping = os.environ.get(SHAPING_ENV)
    if shaping:  # before the handler's import, which may build its channel at module level
        from local.lambda_.lambda_speed import install_shaping

        install_shaping(shaping)
    return _load(handler)


def run(handler: str, event_file: Path, result_file: Path, request_id: str) -> None:
    _answer(_init(handler), event_file, result_file, request_id)


def serve(handler: str) -> int:
    """A warm sandbox: one Init, then invocations until stdin closes."""
    control = os.fdopen(int(os.environ.pop(CONTROL_FD_ENV)), "wb", buffering=0)
    function = _init(handler)
    for line in sys.stdin:
        request = json.loads(line)
        _output_to(Path(request["log"]))
        os.environ[DEADLINE_ENV] = str(request["deadline_ms"])
        _answer(function, Path(request["event"]), Path(request["result"]),
                str(request["request_id"]))
        sys.stdout.flush()
        sys.stderr.flush()
        control.write(DONE)
    return 0


def _output_to(log: Path) -> None:
    """Point stdout and stderr (the file descriptors, so every writer follows) at ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _answer(function: Callable[..., Any] | dict[str, Any], event_file: Path,
            result_file: Path, request_id: str) -> None:
    """Call the handler (or report its Init error); write RESULT_FILE atomically."""
    if isinstance(function, dict):
        outcome = dict(function)  # a copy: a warm sandbox reports it again
    else:
        event = json.loads(event_file.read_text())
        peak_file(result_file).write_text(str(_peak_rss_kb() or 0))
        try:
            result = function(event, LambdaContext(request_id, dict(os.environ)))
        except Exception as error:  # the handler's error becomes the invocation's error
            outcome = _error(type(error).__name__, str(error),
                             traceback.format_exception(error))
            traceback.print_exc()
        else:
            try:
                outcome = {"result": json.loads(json.dumps(result))}
            except (TypeError, ValueError) as error:
                outcome = _error("Runtime.MarshalError", f"Unable to marshal response: {error}")
    peak_kb = _peak_rss_kb()
    if peak_kb is not None:
        outcome[PEAK_RSS_KEY] = peak_kb
    partial = result_file.with_suffix(".partial")
    partial.write_text(json.dumps(outcome))
    partial.replace(result_file)  # atomic: the parent never reads half a result


def _peak_rss_kb() -> int | None:
    """VmHWM: the peak since exec (ru_maxrss would include the parent's size before exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--serve":
        return serve(argv[1])
    if len(argv) != 4:
        print("usage: python -m local.lambda_.invoke HANDLER EVENT_FILE RESULT_FILE REQUEST_ID\n"
              "       python -m local.lambda_.invoke --serve HANDLER", file=sys.stderr)
        return 2
    handler, event_file, result_file, request_id = argv
    run(handler, Path(event_file), Path(result_file), request_id)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
