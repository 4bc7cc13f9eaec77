"""Where a profile's coefficients come from, per coefficient group, machine-readable.

A workload profile's groups are ``compute`` (a, b, m; also cpu_step_s, cpu_sample_s) and
``memory`` (k, c); a platform profile's are ``transfer`` (p, t, duplex and the client's CPU
figures) and ``cold_start`` (invocation_overhead_s, torch_load_cpu_s). Each group has one
:class:`Provenance` of a kind:

* ``measured`` — fitted from measurements; ``platform`` says where (``aws-lambda-x86_64``,
  ``local-emulation``: a machine under python -m local's Lambda emulation) and ``date`` when
  (YYYY-MM-DD); the fit's ``r_squared`` and ``max_relative_error`` where known, and
  ``failed_fit: true`` when the fit missed the profiler's quality gates and was kept anyway
  (``--accept-failed-fit``; planner/fit/gates.py).
* ``paper`` — copied from a publication's tables or data (FasDL's Table II, its bandwidth
  sheets), measured by others on their runtime.
* ``chosen`` — set by a stated rule or assumption, not measured (the thesis rule for c).
* ``provisional`` — a placeholder or guess, to be replaced by a profile.

In JSON a profile's ``provenance`` is either one entry for every group or an object of entries
by group name, every group named, e.g.
``{"compute": {"kind": "paper", "note": "FasDL Table II"}, "memory": {"kind": "chosen"}}``.
A profile without ``provenance`` (written before it existed) counts as ``provisional`` in
every group: nothing says it was measured. Every invalid entry raises ProfileError naming the
field and the allowed values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fasdl.contract.fields import IDENTIFIER
from planner.model.inputs.profile_fields import ProfileError, bad, number

KINDS: tuple[str, ...] = ("measured", "paper", "chosen", "provisional")
WORKLOAD_GROUPS: tuple[str, ...] = ("compute", "memory")
PLATFORM_GROUPS: tuple[str, ...] = ("transfer", "cold_start")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ENTRY_FIELDS = ("kind", "platform", "date", "r_squared", "max_relative_error", "failed_fit",
                 "note")
NOTE_MAX_CHARS = 500


@dataclass(frozen=True)
class Provenance:
    """One coefficient group's origin; ``field`` in errors is the entry's JSON path."""

    kind: str
    platform: str | None = None
    date: str | None = None
    r_squared: float | None = None
    max_relative_error: float | None = None
    note: str = ""
    failed_fit: bool = False  # below the quality gates, kept on the user's word

    @property
    def measured(self) -> bool:
        return self.kind == "measured"

    def describe(self) -> str:
        """One phrase for the printed plan: 'measured on local-emulation 2026-11-22'."""
        text = (f"measured on {self.platform} {self.date}" if self.measured
                else {"paper": "from the paper", "chosen": "chosen, not measured",
                      "provisional": "provisional"}[self.kind])
        if self.max_relative_error is not None:
            text += f", fit max relative error {self.max_relative_error:.0%}"
        if self.failed_fit:
            text += ", FIT BELOW THE GATES"
        return text

    def to_dict(self) -> dict[str, Any]:
        data = {"kind": self.kind, "platform": self.platform, "date": self.date,
                "r_squared": self.r_squared, "max_relative_error": self.max_relative_error,
                "note": self.note, "failed_fit": self.failed_fit or None}
        return {key: value for key, value in data.items() if value not in (None, "")}


NOT_RECORDED = Provenance("provisional", note="no provenance recorded in the profile")


def measured_today(platform: str, *, r_squared: float | None = None,
                   max_relative_error: float | None = None, note: str = "",
                   failed_fit: bool = False) -> Provenance:
    """What a fit writes: measured on ``platform`` today (UTC), with its fit quality."""
    return parse_entry("provenance", {
        "kind": "measured", "platform": platform,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "r_squared": None if r_squared is None else round(r_squared, 4),
        "max_relative_error": (None if max_relative_error is None
                               else round(max_relative_error, 4)),
        "note": note, "failed_fit": failed_fit})


def parse_entry(path: str, data: object) -> Provenance:
    """One entry from JSON (or a Provenance, returned as is)."""
    if isinstance(data, Provenance):
        return data
    if not isinstance(data, Mapping):
        raise bad(path, f"must be an object with a 'kind' ({', '.join(KINDS)}), got {data!r}")
    unknown = sorted(set(data) - set(_ENTRY_FIELDS))
    if unknown:
        raise bad(f"{path}.{unknown[0]}", f"is not a provenance field; known: "
                                          f"{', '.join(_ENTRY_FIELDS)}")
    kind = data.get("kind")
    if kind not in KINDS:
        raise bad(f"{path}.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    platform, date = _where_and_when(path, data, str(kind))
    note = data.get("note", "")
    if not isinstance(note, str) or len(note) > NOTE_MAX_CHARS:
        raise bad(f"{path}.note", f"must be a string of at most {NOTE_MAX_CHARS} characters")
    quality = {name: None if data.get(name) is None
               else number(f"{path}.{name}", data[name], low=low, high=high)
               for name, low, high in (("r_squared", -1e6, 1.0),
                                       ("max_relative_error", 0.0, 1e6))}
    failed_fit = data.get("failed_fit", False)
    if not isinstance(failed_fit, bool) or (failed_fit and kind != "measured"):
        raise bad(f"{path}.failed_fit", f"must be true or false, and true only for a measured "
                                        f"group, got {failed_fit!r}")
    return Provenance(kind=str(kind), platform=platform, date=date, note=note,
                      failed_fit=failed_fit, **quality)


def _where_and_when(path: str, data: Mapping[str, Any], kind: str) -> tuple[Any, Any]:
    """A measured group's platform and date (checked); None, None for the other kinds."""
    platform, date = data.get("platform"), data.get("date")
    if kind == "measured":
        if not isinstance(platform, str) or not IDENTIFIER.fullmatch(platform):
            raise bad(f"{path}.platform", "a measured group names where it was measured: an "
                      f"identifier such as aws-lambda-x86_64 or local-emulation, got {platform!r}")
        if not isinstance(date, str) or not _DATE.fullmatch(date):
            raise bad(f"{path}.date", f"a measured group says when: YYYY-MM-DD, got {date!r}")
    elif platform is not None or date is not None:
        raise bad(f"{path}.platform", f"platform and date belong to a measured group only, "
                                      f"not to kind {kind!r}")
    return platform, date


def parse_provenance(data: object, groups: tuple[str, ...]) -> dict[str, Provenance]:
    """A profile's ``provenance`` field: {} (not recorded), one entry for every group, or one
    entry per group."""
    if data is None or (isinstance(data, Mapping) and not data):
        return {}
    if isinstance(data, Mapping) and "kind" in data:
        entry = parse_entry("provenance", data)
        return dict.fromkeys(groups, entry)
    if not isinstance(data, Mapping):
        raise bad("provenance", f"must be an object: one entry, or one per group "
                                f"({', '.join(groups)}), got {data!r}")
    unknown = sorted(set(data) - set(groups))
    if unknown:
        raise bad(f"provenance.{unknown[0]}", f"is not a coefficient group; groups: "
                                              f"{', '.join(groups)}")
    missing = [group for group in groups if group not in data]
    if missing:
        raise bad(f"provenance.{missing[0]}", f"is missing: name every group "
                                              f"({', '.join(groups)}) or give one entry")
    return {group: parse_entry(f"provenance.{group}", data[group]) for group in groups}


def provenance_dict(provenance: Mapping[str, Provenance]) -> dict[str, Any]:
    return {group: entry.to_dict() for group, entry in provenance.items()}


def group_of(provenance: Mapping[str, Provenance], group: str) -> Provenance:
    """The group's provenance; not recorded counts as provisional."""
    return provenance.get(group, NOT_RECORDED)


__all__ = ["KINDS", "NOT_RECORDED", "PLATFORM_GROUPS", "WORKLOAD_GROUPS", "ProfileError",
           "Provenance", "group_of", "measured_today", "parse_entry", "parse_provenance",
           "provenance_dict"]
