"""What counts as an integer or a number in any input this project checks: JSON documents,
events, environment-derived settings, command-line values. Python's ``bool`` is an ``int``
subclass, so ``True`` would pass ``isinstance(value, int)``; it is never a count or a size
here. Every input check asks these predicates (stdlib only: the trigger imports them), and
the errors of the plan, profile and planning-problem checks share :class:`FieldError`.
"""

from __future__ import annotations

import numbers
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
