"""Re-plan Lambda: the state "Re-plan segment" of an adaptive run, between "Plan next segment"
and the segment's Map (infra/replan.py, synthesized only for a plan whose training.adaptive is
not ``off``).

``{"run": RunState}`` → the run state for the segment about to start: unchanged, cut to end at
an epoch's start, or switched to a recorded decision's plan (planner/adapt/run_step.py decides
and records; this module only routes). A finished run (``done``) passes through. Its own
duration and memory go into ``run.usage`` as an orchestration invocation, as the trigger's do.
A decision it cannot make (no worker results, unreadable records or profiles) raises
ReplanError, and the state machine records the failure.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from fasdl.aws.metrics import get_logger
from fasdl.contract.settings import Settings
from fasdl.contract.training import (
    BUNDLED_PROFILES,
    CACHE_ECPU_MAX_ENV,
    MEASURED_ON_ENV,
    PROFILES_ENV,
)
from fasdl.exchange import stores
from fasdl.run import run_state, usage
from fasdl.run.run_records import RunRecords
from planner.adapt.profiles_file import Profiles, read_profiles
from planner.adapt.run_step import ADAPTIVE, StepContext, replan_step

logger = get_logger("fasdl-replan")
# The code's root: the synth puts the plan's profiles beside the packages
CODE_ROOT = Path(__file__).resolve().parents[1]


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> Mapping[str, object]:
    began = time.monotonic()
    run = run_state.parse_run(event.get("run"))
    if run.get("done"):
        return run
    settings = Settings.from_env()
    records = RunRecords(stores.s3_client(settings), settings)
    stepped = replan_step(run, records, step_context(settings.runs_prefix))
    if stepped.get(ADAPTIVE) != run.get(ADAPTIVE) or stepped["plan_key"] != run["plan_key"]:
        logger.info("adaptation", extra={"segment": run["segment"]["index"],
                                         "adaptive": stepped.get(ADAPTIVE),
                                         "plan_key": stepped["plan_key"],
                                         "iterations": stepped["segment"]["iterations"]})
    totals = usage.usage_of(stepped)
    if totals is None:
        return stepped
    return {**stepped, "usage": usage.with_trigger(totals, time.monotonic() - began,
                                                   usage.memory_of(context))}


def step_context(runs_prefix: str) -> StepContext:
    """What the decision needs besides the run state: the plan's profiles, the clock, where
    the measurements come from and the deployed cache's ECPU/s maximum."""
    ecpu_max = os.environ.get(CACHE_ECPU_MAX_ENV)
    return StepContext(runs_prefix=runs_prefix, profiles=plan_profiles(),
                       now=time.time(),
                       measured_on=os.environ.get(MEASURED_ON_ENV, "aws-lambda"),
                       cache_ecpu_max=float(ecpu_max) if ecpu_max else None)


@cache
def plan_profiles() -> Profiles:
    """The profiles the synth shipped (or ``FASDL_REPLAN_PROFILES``), read once per sandbox."""
    path = os.environ.get(PROFILES_ENV) or str(CODE_ROOT / BUNDLED_PROFILES)
    return read_profiles(Path(path))
