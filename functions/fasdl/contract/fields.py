"""Field checking, the one vocabulary of the contract: ``FieldError`` (a field and what is
wrong with it), the plan's ``PlanError`` and its ``require_*`` checks, used for the plan, the
workload, events, settings and command-line values. Each check names the field, the value
(cut short) and the allowed range. Stdlib only: the trigger imports it. A ``require_*`` check
takes a ``fail`` where another door raises its own FieldError (the planner's profiles:
planner/model/inputs/profile_fields.py).

What counts as an integer or a number: Python's ``bool`` is an ``int`` subclass, so ``True``
would pass ``isinstance(value, int)``; it is never a count or a size here.
"""

from __future__ import annotations

import difflib
import math
import numbers
import re
from collections.abc import Callable
from typing import TypeGuard


class FieldError(ValueError):
    """Bad input that names where: ``field`` (a dotted path; None when the input as a whole
    is wrong) and ``detail`` (what is wrong, without the field's name), so a caller can say
    where the field came from (a file, a flag, a fitted value)."""

    def __init__(self, message: str, field: str | None, detail: str) -> None:
        super().__init__(message)
        self.field = field
        self.detail = detail


def is_int(value: object) -> TypeGuard[int]:
    """A Python integer, not a bool (what JSON and argparse produce)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_integral(value: object) -> TypeGuard[int]:
    """An integer of Python or numpy (``np.int64`` registers as numbers.Integral)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """A Python int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_real(value: object) -> TypeGuard[float]:
    """A real number of Python or numpy (numbers.Real), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int_at_least(value: object, low: int) -> TypeGuard[int]:
    return is_int(value) and value >= low


def is_int_in(value: object, low: int, high: int) -> TypeGuard[int]:
    """An integer in [low, high]."""
    return is_int(value) and low <= value <= high

# (field, detail) -> the error to raise: PlanError, or another door's own FieldError
Fail = Callable[[str, str], FieldError]


def show(value: object) -> str:
    """repr() of a value, cut short: an error names the value without echoing a megabyte."""
    if isinstance(value, int) and value.bit_length() > 256:  # repr() refuses > 4300 digits
        return f"an integer of about {int(value.bit_length() * math.log10(2))} digits"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


# ---- the plan ---------------------------------------------------------------------------------
# \Z, not $: "$" also matches before a trailing newline, so "us-east-1\n" would pass even
# where a caller uses .match instead of .fullmatch.
IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}\Z")
DATASET_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,255}\Z")
REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d\Z")

# AWS's commercial partition ("aws"): a Lambda + Step Functions stack deploys only where the
# region exists, and the stack's ARNs assume this partition (China and GovCloud differ).
# A region AWS opens later is one line here.
AWS_REGIONS: frozenset[str] = frozenset({
    "af-south-1", "ap-east-1", "ap-east-2", "ap-northeast-1", "ap-northeast-2",
    "ap-northeast-3", "ap-south-1", "ap-south-2", "ap-southeast-1", "ap-southeast-2",
    "ap-southeast-3", "ap-southeast-4", "ap-southeast-5", "ap-southeast-6", "ap-southeast-7",
    "ca-central-1", "ca-west-1", "eu-central-1", "eu-central-2", "eu-north-1", "eu-south-1",
    "eu-south-2", "eu-west-1", "eu-west-2", "eu-west-3", "il-central-1", "me-central-1",
    "me-south-1", "me-west-1", "mx-central-1", "sa-east-1", "sa-west-1", "us-east-1",
    "us-east-2", "us-west-1", "us-west-2",
})


class PlanError(FieldError):
    """An invalid plan. ``field`` is the dotted path of the offending field."""

    field: str

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"plan field '{field_path}': {message}", field_path, message)


def require_int(path: str, value: object, low: int, high: int | None = None, *,
                fail: Fail = PlanError) -> int:
    bound = f"[{low}, {high}]" if high is not None else f">= {low}"
    if not is_int(value):
        raise fail(path, f"must be an integer {bound}, got {show(value)}")
    if value < low or (high is not None and value > high):
        raise fail(path, f"must be in {bound}, got {show(value)}")
    return value


def require_float(path: str, value: object, low: float, high: float, *, open_low: bool = False,
                  open_high: bool = False, fail: Fail = PlanError) -> float:
    if not is_number(value):
        raise fail(path, f"must be a number, got {show(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the double range
        number = math.inf
    below = number <= low if open_low else number < low
    above = number >= high if open_high else number > high
    if below or above or number != number:  # NaN fails every comparison
        left = "(" if open_low else "["
        right = ")" if open_high else "]"
        raise fail(path, f"must be in {left}{low}, {high}{right}, got {show(value)}")
    return number


def require_choice(path: str, value: object, choices: tuple[str, ...],
                   fail: Fail = PlanError) -> str:
    if not isinstance(value, str) or value not in choices:
        raise fail(path, f"must be one of {', '.join(choices)}, got {show(value)}")
    return value


def require_pattern(path: str, value: object, pattern: re.Pattern[str] | None, what: str,
                    fail: Fail = PlanError) -> str:
    """A string (matching ``pattern`` when there is one)."""
    if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
        raise fail(path, f"must be {what}, got {show(value)}")
    return value


def require_dataset_key(path: str, value: object, fail: Fail = PlanError) -> str:
    """An S3 key prefix: the pattern, and no empty, '.' or '..' segment (no escaping the
    datasets prefix, no '//' keys)."""
    key = require_pattern(path, value, DATASET_KEY,
                          "an S3 key prefix of 1-256 letters, digits, '_', '.', '-', '/'", fail)
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise fail(path, "must be '/'-separated names without empty, '.' or '..' "
                              f"segments, got {show(value)}")
    return key


def require_region(path: str, value: object) -> str:
    region = require_pattern(path, value, REGION, "an AWS region name such as us-east-1")
    if region not in AWS_REGIONS:
        close = difflib.get_close_matches(region, sorted(AWS_REGIONS), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise PlanError(path, f"must be one of AWS's {len(AWS_REGIONS)} commercial regions "
                              f"(fasdl.contract.fields.AWS_REGIONS), got {show(value)}{hint}")
    return region


def require_text_map(path: str, value: object, *, max_chars: int) -> dict[str, str]:
    """An object of identifier keys and printable string values of at most ``max_chars``."""
    if not isinstance(value, dict):
        raise PlanError(path, f"must be an object of string values, got {type(value).__name__}")
    for key, text in value.items():
        require_pattern(f"{path}.{key}" if isinstance(key, str) else path, key, IDENTIFIER,
                        "keyed by identifiers of 1-64 letters, digits, '_', '.', '-'")
        if not isinstance(text, str) or not text.isprintable() or len(text) > max_chars:
            raise PlanError(f"{path}.{key}", f"must be printable text of at most {max_chars} "
                                             f"characters, got {show(text)}")
    return dict(value)


def require_number_map(path: str, value: object) -> dict[str, float]:
    """An object of identifier keys and finite numbers (the prediction's breakdown)."""
    if not isinstance(value, dict):
        raise PlanError(path, f"must be an object of numbers, got {type(value).__name__}")
    for key, number in value.items():
        require_pattern(f"{path}.{key}", key, IDENTIFIER,
                        "keyed by identifiers of 1-64 letters, digits, '_', '.', '-'")
        require_float(f"{path}.{key}", number, -1e15, 1e15)
    return dict(value)
