"""The planner's profile readers (workload, platform and price profiles): ``ProfileError`` and
the checks that raise it, built on the contract's one field vocabulary (fasdl.contract.fields:
FieldError, ``show``, the ``require_*`` checks given ``fail=bad``). The planner's alone: they
ship in no Lambda asset."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import MISSING, fields
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fasdl.contract.fields import FieldError, is_number, show
from fasdl.contract.json_input import (
    JsonInputError,
    load_json_bytes,
    read_json_file,
    unknown_field_message,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class ProfileError(FieldError):
    """An invalid or unknown profile. ``field`` names the offending field when there is one,
    ``detail`` what is wrong with it (the message without the field's name), so a caller can
    say where the field came from (a file, a fitted value)."""

    def __init__(self, message: str, field: str | None = None,
                 detail: str | None = None) -> None:
        super().__init__(message, field, detail if detail is not None else message)


def bad(field_name: str, message: str) -> ProfileError:
    """The profile checks' ``fail``."""
    return ProfileError(f"profile field '{field_name}': {message}", field_name, message)


def number(field_name: str, value: object, *, low: float = -math.inf, above: bool = False,
           high: float = math.inf) -> float:
    """A finite real in [low, high] ((low, high] when ``above``); bools are rejected although
    they are ints."""
    relation = ">" if above else ">="
    bound = "" if low == -math.inf else f" {relation} {low}"
    bound += "" if high == math.inf else f"{' and' if bound else ''} <= {high}"
    try:
        finite = is_number(value) and math.isfinite(value)
    except OverflowError:  # an int beyond the double range
        finite = False
    if not finite or not is_number(value):
        raise bad(field_name, f"must be a finite number{bound}, got {show(value)}")
    if value < low or (above and value == low) or value > high:
        raise bad(field_name, f"must be{bound}, got {show(value)}")
    return float(value)


def set_field(instance: object, name: str, value: object) -> None:
    object.__setattr__(instance, name, value)  # normalising a frozen dataclass in __post_init__


def series(field_name: str, values: object, *, positive: bool) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)) or not values:
        raise bad(field_name, f"must be a non-empty list of numbers, got {show(values)}")
    return tuple(number(f"{field_name}[{index}]", value, low=0.0, above=positive)
                 for index, value in enumerate(values))


_Profile = TypeVar("_Profile", bound="DataclassInstance")


def construct(kind: type[_Profile], data: object) -> _Profile:
    """Build a profile from a JSON object: unknown and missing fields are named, then the
    dataclass's own validation names any bad value."""
    required = [f.name for f in fields(kind)
                if f.default is MISSING and f.default_factory is MISSING]
    return kind(**check_names(kind.__name__, data, [f.name for f in fields(kind)], required))


def check_names(kind: str, data: object, known: Sequence[str],
                required: Sequence[str]) -> dict[str, Any]:
    """``data`` as a JSON object of only ``known`` fields and every ``required`` one, or a
    ProfileError naming the first unknown or missing field."""
    if not isinstance(data, dict):
        raise ProfileError(f"a {kind} must be a JSON object, got {type(data).__name__}",
                           "<root>")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise bad(str(unknown[0]), unknown_field_message(str(unknown[0]), list(known)))
    missing = [name for name in required if name not in data]
    if missing:
        raise bad(missing[0], f"is missing; required fields: {', '.join(required)}")
    return data


# Profiles are a few KB (a platform profile lists some memories); the limits stop hostile or
# broken files before they cost memory or a traceback.
PROFILE_MAX_BYTES = 1024 * 1024
PROFILE_MAX_DEPTH = 4  # a platform profile's lists are at depth 2


def read_profile_json(resource: Traversable | Path, what: str) -> object:
    try:
        if isinstance(resource, Path):
            return read_json_file(resource, what=what, max_bytes=PROFILE_MAX_BYTES,
                                  max_depth=PROFILE_MAX_DEPTH)
        return load_json_bytes(resource.read_bytes(), what=f"{what} {resource}",
                               max_bytes=PROFILE_MAX_BYTES, max_depth=PROFILE_MAX_DEPTH)
    except OSError as error:
        raise ProfileError(f"cannot read {what} {resource}: {error}", "<file>") from error
    except JsonInputError as error:
        raise ProfileError(str(error), "<file>") from error
