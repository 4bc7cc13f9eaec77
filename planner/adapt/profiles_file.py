"""The profiles an adaptive plan was made with, in one JSON file beside it (issue 42).

``planner plan --adaptive ... --out plan.json`` writes ``plan.profiles.json``
(fasdl.contract.training.profiles_path): the workload profile, the platform profile and the
prices, each as its own file would hold it. The synth ships it with the re-plan function,
which rebuilds the plan's problem from it (planner/adapt/plan_problem.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fasdl.contract.plan import Plan
from fasdl.contract.training import profiles_path
from planner.adapt.replan import ReplanError
from planner.model.inputs.profile_fields import ProfileError
from planner.model.inputs.profiles import PlatformProfile, Prices, WorkloadProfile

Profiles = tuple[WorkloadProfile, PlatformProfile, Prices]
SECTIONS = ("workload", "platform", "prices")
Writer = Callable[[Path, str], object]


def profiles_json(workload: WorkloadProfile, platform: PlatformProfile, prices: Prices) -> str:
    """The file's text: one object with the three profiles, keys sorted."""
    document = {"workload": workload.to_dict(), "platform": platform.to_dict(),
                "prices": prices.to_dict()}
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def write_profiles(plan: Plan, plan_path: Path, profiles: Profiles,
                   write: Writer = Path.write_text) -> Path | None:
    """An adaptive plan's profiles beside ``plan_path``, put there by ``write`` (the CLI's
    writes atomically); the file's path, or None for a static plan, which needs none."""
    if plan.training.adaptive == "off":
        return None
    path = profiles_path(plan_path)
    write(path, profiles_json(*profiles))
    return path


def read_profiles(path: Path) -> Profiles:
    """The three profiles of ``path``; ReplanError names the file and the section at fault."""
    try:
        document: Any = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ReplanError(f"{path}: the plan's profiles cannot be read ({error}); plan again "
                          "with planner plan --out, which writes them beside the plan") from error
    missing = [name for name in SECTIONS if not isinstance(document, dict)
               or not isinstance(document.get(name), dict)]
    if missing:
        raise ReplanError(f"{path}: needs the objects {', '.join(SECTIONS)}; missing or not "
                          f"an object: {', '.join(missing)}")
    try:
        return (WorkloadProfile.from_dict(document["workload"]),
                PlatformProfile.from_dict(document["platform"]),
                Prices.from_dict(document["prices"]))
    except ProfileError as error:
        raise ReplanError(f"{path}: {error}") from error
