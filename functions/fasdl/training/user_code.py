"""Import the user's own code named by a ``file.py:function`` reference (fasdl.contract.workload):
from the file where it lies (local runs, the planner, the synth), or, where that path does not
exist (Lambda), from the module the synth shipped it as (``FASDL_USER_MODULES``)."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fasdl.contract.settings import Settings
from fasdl.contract.user_code import ModelRef, UserCodeError, code_location


def _module_name(file: str, reference: str, field: str) -> str:
    path = Path(file)
    if path.is_file():
        location = code_location(path, field)
        if str(location.root) not in sys.path:
            sys.path.insert(0, str(location.root))
        return location.module
    shipped = Settings.user_module_map(Settings.read_one("user_modules"))
    if reference in shipped:
        return str(shipped[reference])
    raise UserCodeError(field, f"file {file} not found (paths are relative to the folder the "
                               f"command runs in; on AWS the synth ships the plan's own files)")


def load_function(reference: ModelRef, field: str) -> Callable[..., Any]:
    """The function a ``file.py:function`` reference names."""
    if reference.code is None:
        raise UserCodeError(field, f"must be path/to/file.py:function, got {reference.name!r}")
    file, name = reference.code
    module_name = _module_name(file, reference.name, field)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # the user's module failed on import: say which and why
        raise UserCodeError(field, f"importing {file} failed: {type(error).__name__}: "
                                   f"{error}") from error
    function: object = getattr(module, name, None)
    if not callable(function):
        raise UserCodeError(field, f"{file} has no function {name!r}")
    return function


def check_signature(function: Callable[..., Any], args: tuple[Any, ...], field: str,
                    expected: str) -> None:
    """The function takes these positional arguments, or a clear error saying what it must."""
    try:
        inspect.signature(function).bind(*args)
    except TypeError as error:
        raise UserCodeError(field, f"{function.__name__} must be {expected} ({error})") from None
    except ValueError:  # a builtin without a signature: let the call decide
        return
