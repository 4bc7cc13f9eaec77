"""Run state of the training state machine: start, next segment, shortened or plain retry.

Pure stdlib (the trigger Lambda has no torch or numpy). A run is cut into segments of at most
``training.segment_iterations`` iterations; ``next`` keeps the length of the segment just
finished, so once a timeout has halved it the rest of the run stays at the shorter length
(a segment that timed out once would time out again). ``shorten`` halves the same segment
and bumps its attempt, which gives it fresh exchange keys; it gives up after
:data:`MAX_ATTEMPTS` attempts or when one iteration no longer fits. ``retry`` (a worker
crashed) reruns the same segment at the same length with ``attempt + 1`` and counts
``segment.retries``; it gives up after :data:`MAX_RETRIES` retries or :data:`MAX_ATTEMPTS`.

Every new state carries a fresh ``segment.epoch`` the trigger issued (fasdl.run.fencing): the
namespace of everything the segment's workers write. ``segment.resume_epoch`` names the epoch
whose checkpoint the segment restores from (0 at iteration 0): ``next`` sets it to the epoch
of the segment that just finished; ``shorten`` and ``retry`` keep it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, cast

from fasdl.contract import keys
from fasdl.contract.cache import parse_endpoint
from fasdl.contract.events import RunState, Segment
from fasdl.contract.fields import is_int_at_least, is_number
from fasdl.contract.json_input import unknown_field_message
from fasdl.contract.keys import manifest_key
from fasdl.contract.plan import Plan, PlanError
from fasdl.contract.run_owner import RunOwner
from fasdl.run import guards, run_claim
from fasdl.run.dataset_check import check_dataset, s3_ranges, s3_sizes
from fasdl.run.fencing import EpochIssuer

MAX_ATTEMPTS = 6  # per segment: 1 + 5 halvings turn a 900 s segment into < 30 s
MAX_RETRIES = 2  # per segment: same-length reruns after a crash (a repeatable bug stops soon)
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_DEPLOYMENT_FIELDS = ("channel", "arch", "memory_mb", "workers", "region", "timeout_s")
INPUT_FIELDS = ("run_id", "epochs", "dataset", "plan", "resume", "limits",  # contract.events
                "adaptive")
# Step Functions adds it to the input of an execution another one started (continue-as-new)
STARTED_BY_FIELD = "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID"


class RunStateError(ValueError):
    """Malformed trigger input or run state; the message names the field."""


class RetriesExhausted(RuntimeError):
    """A segment cannot be shortened again: the run takes the failure path."""


# ---- the run state (fasdl.contract.events RunState)
# -------------------------------------------------
def segment(index: int, start_iteration: int, iterations: int, attempt: int, *, epoch: int,
            resume_epoch: int) -> Segment:
    return {"index": index, "start_iteration": start_iteration, "iterations": iterations,
            "attempt": attempt, "epoch": epoch, "resume_epoch": resume_epoch}


def first_state(plan: Plan, run_id: str, plan_key: str, *, epoch: int) -> RunState:
    iterations = min(plan.training.segment_iterations, plan.total_iterations)
    first = segment(0, 0, iterations, 0, epoch=epoch, resume_epoch=0)
    return {"run_id": run_id, "plan_key": plan_key, "segment": first,
            "workers": list(range(plan.deployment.workers)), "done": False,
            "cache": None}  # the trigger sets the Valkey endpoint (fasdl.contract.cache)


def _int_field(data: Mapping[str, Any], name: str, path: str, low: int = 0) -> int:
    value = data.get(name)
    if not is_int_at_least(value, low):
        raise RunStateError(f"run state field '{path}.{name}': must be an integer >= {low}, "
                            f"got {value!r}")
    return value


def parse_run(run: object) -> RunState:
    """Check a run state handed back by the state machine (shape only)."""
    if not isinstance(run, dict):
        raise RunStateError(f"run state field 'run': must be an object, got {run!r}")
    for name in ("run_id", "plan_key"):
        if not isinstance(run.get(name), str) or not run[name]:
            raise RunStateError(f"run state field 'run.{name}': must be a non-empty string")
    seg = run.get("segment")
    if not isinstance(seg, dict):
        raise RunStateError("run state field 'run.segment': must be an object")
    for name in ("index", "start_iteration", "iterations", "attempt", "resume_epoch"):
        _int_field(seg, name, "run.segment")
    _int_field(seg, "epoch", "run.segment", low=1)
    if "retries" in seg:
        _int_field(seg, "retries", "run.segment")
    workers = run.get("workers")
    if not isinstance(workers, list) or workers != list(range(len(workers))) or not workers:
        raise RunStateError("run state field 'run.workers': must be [0, 1, ..., W-1]")
    if "workers_cap" in run:
        _int_field(run, "workers_cap", "run", low=1)
    try:
        parse_endpoint(run.get("cache"), "run.cache")
    except ValueError as error:
        raise RunStateError(f"run state {error}") from error
    return cast(RunState, run)


def next_state(run: RunState, plan: Plan, *, epoch: int) -> RunState:
    """The segment after ``run.segment`` (attempt 0), or ``done`` after the last one; it
    resumes from the checkpoint the finished segment's epoch wrote."""
    current = run["segment"]
    start = current["start_iteration"] + current["iterations"]
    remaining = plan.total_iterations - start
    epochs = {"epoch": epoch, "resume_epoch": current["epoch"]}
    if remaining <= 0:
        return {**run, "segment": segment(current["index"] + 1, start, 0, 0, **epochs),
                "done": True}
    length = min(max(1, current["iterations"]), plan.training.segment_iterations, remaining)
    return {**run, "segment": segment(current["index"] + 1, start, length, 0, **epochs),
            "done": False}


def shorten_state(run: RunState, error: object = None, *, epoch: int) -> RunState:
    """The same segment with half the iterations and ``attempt + 1``."""
    current = run["segment"]
    attempt = current["attempt"] + 1
    iterations = current["iterations"] // 2
    why = _describe(error)
    if iterations < 1:
        raise RetriesExhausted(
            f"segment {current['index']} (iteration {current['start_iteration']}) timed out "
            f"with a single iteration; nothing left to shorten{why}")
    if attempt >= MAX_ATTEMPTS:
        raise RetriesExhausted(
            f"segment {current['index']} (iteration {current['start_iteration']}) timed out "
            f"{attempt} times; giving up after {MAX_ATTEMPTS} attempts{why}")
    return {**run, "segment": segment(current["index"], current["start_iteration"], iterations,
                                      attempt, epoch=epoch,
                                      resume_epoch=current["resume_epoch"]), "done": False}


def retry_state(run: RunState, error: object = None, *, epoch: int) -> RunState:
    """The same segment, same length, ``attempt + 1`` and ``retries + 1`` (a worker crashed)."""
    current = run["segment"]
    attempt = current["attempt"] + 1
    retries = int(current.get("retries", 0)) + 1
    why = _describe(error)
    if retries > MAX_RETRIES:
        raise RetriesExhausted(
            f"segment {current['index']} (iteration {current['start_iteration']}) failed "
            f"{retries} times at the same length; giving up after {MAX_RETRIES} "
            f"retries{why}")
    if attempt >= MAX_ATTEMPTS:
        raise RetriesExhausted(
            f"segment {current['index']} (iteration {current['start_iteration']}) failed "
            f"{attempt} times; giving up after {MAX_ATTEMPTS} attempts{why}")
    again = segment(current["index"], current["start_iteration"], current["iterations"],
                    attempt, epoch=epoch, resume_epoch=current["resume_epoch"])
    return {**run, "segment": {**again, "retries": retries}, "done": False}


def _describe(error: object) -> str:
    if isinstance(error, dict) and error.get("Error"):
        return f" (last error: {error.get('Error')}: {str(error.get('Cause', ''))[:300]})"
    return ""


# ---- start: overrides and validation ---------------------------------------------------------
def parse_fingerprint(fingerprint: str) -> dict[str, str]:
    """``channel:arch:<M>MB:W<n>:region:<t>s`` (Plan.deployment_fingerprint) as fields."""
    parts = fingerprint.split(":")
    if len(parts) != len(_DEPLOYMENT_FIELDS):
        raise RunStateError(f"environment variable FASDL_DEPLOYMENT: not a deployment "
                            f"fingerprint: {fingerprint!r}")
    channel, arch, memory, workers, region, timeout = parts
    return {"channel": channel, "arch": arch, "memory_mb": memory.removesuffix("MB"),
            "workers": workers.removeprefix("W"), "region": region,
            "timeout_s": timeout.removesuffix("s")}


def check_deployment(plan: Plan, fingerprint: str) -> None:
    """Raise a PlanError naming the first deployment field that differs from the stack's.

    A stack serves a plan of any W up to its ceiling when the plan states that ceiling (the
    plans a re-plan changes to, planner/adapt/run_step.py, do): its W may differ."""
    if not fingerprint or plan.deployment_fingerprint() == fingerprint:
        return
    deployed = parse_fingerprint(fingerprint)
    for name in _DEPLOYMENT_FIELDS:
        value = (plan.deployment.workers_label if name == "workers"
                 else str(getattr(plan.deployment, name)))
        if name == "workers" and _within_ceiling(plan, deployed[name]):
            continue
        if value != deployed[name]:
            raise PlanError(f"deployment.{name}",
                            f"the stack is deployed for {name}={deployed[name]}, the plan has "
                            f"{value}; a plan for another deployment needs its own stack "
                            f"(cdk deploy -c plan=...)")


def _within_ceiling(plan: Plan, deployed: str) -> bool:
    """Whether the stack's ceiling (``<w>-<ceiling>``, or ``<w>`` alone) is the ceiling the
    plan states (``deployment.workers_max``: a plan a re-plan changed to always states it)."""
    ceiling = deployed.rpartition("-")[2]
    return plan.deployment.workers_max is not None and \
        str(plan.deployment.workers_max) == ceiling


def resolve_plan(execution_input: Mapping[str, Any], deployed_json: str | None,
                 fingerprint: str) -> Plan:
    """The run's plan: ``input.plan`` or the deployed plan, with the input's overrides."""
    if "plan" in execution_input:
        plan = Plan.from_dict(execution_input["plan"])
    elif deployed_json:
        plan = Plan.from_json(deployed_json)
    else:
        raise RunStateError("input field 'plan': no plan given and FASDL_PLAN is not set")
    check_deployment(plan, fingerprint)
    if "limits" in execution_input:
        plan = dataclasses.replace(plan, limits=guards.run_limits(
            plan, {"limits": input_limits(execution_input)}))
    training_changes: dict[str, Any] = {}
    workload_changes: dict[str, Any] = {}
    if "epochs" in execution_input:
        training_changes["epochs"] = execution_input["epochs"]
    if "adaptive" in execution_input:
        training_changes["adaptive"] = execution_input["adaptive"]
    if "dataset" in execution_input:
        dataset = execution_input["dataset"]
        workload_changes["dataset"] = dataset.strip("/") if isinstance(dataset, str) else dataset
    # Plan.__post_init__ validates again and names the field (training.epochs, ...)
    plan = dataclasses.replace(
        plan, training=dataclasses.replace(plan.training, **training_changes),
        workload=dataclasses.replace(plan.workload, **workload_changes))
    check_policy_served(plan, deployed_json)
    return plan


def check_policy_served(plan: Plan, deployed_json: str | None) -> None:
    """An adaptive policy needs the stack's re-plan state, which only a stack deployed for an
    adaptive plan has: on a static stack the run would silently keep its plan."""
    if plan.training.adaptive == "off" or not deployed_json:
        return
    if Plan.from_json(deployed_json).training.adaptive == "off":
        raise PlanError("training.adaptive",
                        f"{plan.training.adaptive!r} needs a stack deployed for an adaptive "
                        "plan (its state machine re-plans between segments); this one was "
                        "deployed for a static plan: run with adaptive off, or deploy a plan "
                        "made with planner plan (adaptive unless --adaptive off)")


def resolve_run_id(execution_input: Mapping[str, Any], execution: object) -> str:
    run_id = execution_input.get("run_id", execution)
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise RunStateError(f"input field 'run_id': must be 1-128 letters, digits, '_', '.', "
                            f"'-' starting with a letter or digit, got {run_id!r}")
    return run_id


def partition_layout(plan: Plan) -> list[dict[str, int]]:
    """Rows [start, end) and batch size of each worker (what each worker reads by range)."""
    layout: list[dict[str, int]] = []
    start = 0
    for worker, size in enumerate(plan.partition_sizes()):
        layout.append({"worker": worker, "start": start, "end": start + size,
                       "batch": plan.batch_of(worker)})
        start += size
    return layout


# ---- the trigger's actions over S3 (client passed in: boto3 is imported by the caller) -------
def check_input_fields(execution_input: Mapping[str, Any]) -> None:
    """Unknown fields are errors (``{"epoch": 5}`` must not silently run the deployed epochs);
    ``resume`` stands alone but for new ``limits`` (a run a guard stopped)."""
    for name in execution_input:
        if name not in INPUT_FIELDS and name != STARTED_BY_FIELD:
            raise RunStateError(f"input field '{name}': "
                                f"{unknown_field_message(name, INPUT_FIELDS)}")
    others = sorted(set(execution_input) - {"resume", "limits", STARTED_BY_FIELD})
    if "resume" in execution_input and others:
        raise RunStateError(f"input field 'resume': continues a run as it is; it cannot be "
                            f"combined with {', '.join(others)}")


def input_limits(execution_input: Mapping[str, Any]) -> dict[str, float]:
    """The input's ``limits``: some of ``deadline_s`` and ``budget_usd`` (fasdl.run.guards)."""
    given = execution_input["limits"]
    if not isinstance(given, dict) or not given:
        raise RunStateError(f"input field 'limits': must be an object with deadline_s and/or "
                            f"budget_usd, got {given!r}")
    for name, value in given.items():
        if name not in guards.LIMIT_NAMES:
            raise RunStateError(f"input field 'limits.{name}': "
                                f"{unknown_field_message(name, guards.LIMIT_NAMES)}")
        if not is_number(value) or not value > 0:
            raise RunStateError(f"input field 'limits.{name}': must be a number > 0, "
                                f"got {value!r}")
    return dict(given)


def check_resume(run: Mapping[str, Any], s3: Any, *, results_bucket: str,
                 runs_prefix: str) -> None:
    """A console ``resume`` must be the state of an existing run, consistent with its plan,
    its checkpoints and its fence; anything else could mix keys or train past the plan."""
    run_id = resolve_run_id({"run_id": run["run_id"]}, None)
    own_plan = keys.results_key(runs_prefix, keys.plan_key(run_id))
    given = str(run["plan_key"])
    adapted = given.startswith(runs_prefix) and keys.is_adapted_plan_key(
        run_id, given.removeprefix(runs_prefix))
    if given != own_plan and not adapted:
        raise RunStateError(f"input field 'resume.plan_key': must be run {run_id!r}'s own plan "
                            f"{own_plan} or one it changed to (an adaptive run's "
                            f"{keys.results_key(runs_prefix, keys.adapted_plans_prefix(run_id))}"
                            f"NNNNN.json), got {given!r}")
    plan = load_run_plan(s3, results_bucket, run)
    seg = run["segment"]
    if seg["start_iteration"] + seg["iterations"] > plan.total_iterations:
        raise RunStateError(f"input field 'resume.segment': iterations [{seg['start_iteration']}"
                            f", {seg['start_iteration'] + seg['iterations']}) run past the "
                            f"plan's {plan.total_iterations}")
    if len(run["workers"]) != plan.deployment.workers:
        raise RunStateError(f"input field 'resume.workers': the plan has W="
                            f"{plan.deployment.workers}, the state {len(run['workers'])}")
    if seg["start_iteration"] > 0:
        key = keys.results_key(runs_prefix, manifest_key(run_id, seg["start_iteration"],
                                                         seg["resume_epoch"]))
        if s3_sizes(s3, results_bucket)(key) is None:
            raise RunStateError(f"input field 'resume.segment': run {run_id!r} has no checkpoint "
                                f"of epoch {seg['resume_epoch']} at iteration "
                                f"{seg['start_iteration']} (s3://{results_bucket}/{key})")


def start_run(event: Mapping[str, Any], s3: Any, *, datasets_bucket: str, results_bucket: str,
              runs_prefix: str, deployed_json: str | None, fingerprint: str,
              issue_epoch: EpochIssuer) -> RunState:
    """Validate the run, freeze its plan in the results bucket, return segment 0."""
    execution_input = event.get("input") or {}
    if not isinstance(execution_input, dict):
        raise RunStateError(f"field 'input': must be an object, got {execution_input!r}")
    check_input_fields(execution_input)
    if "resume" in execution_input:  # continue-as-new: the run state carries on, and the
        resumed = parse_run(execution_input["resume"])  # old execution's workers are fenced
        check_resume(resumed, s3, results_bucket=results_bucket, runs_prefix=runs_prefix)
        if "limits" in execution_input:  # checked against the run's plan at its next guard
            resumed = {**resumed, "limits": input_limits(execution_input)}
        epoch = issue_epoch(resumed["run_id"], supersedes=resumed["segment"]["epoch"],
                            call=f"resume:{event.get('execution', '')}")
        return {**resumed, "segment": {**resumed["segment"], "epoch": epoch}}
    run_id = resolve_run_id(execution_input, event.get("execution"))
    plan = resolve_plan(execution_input, deployed_json, fingerprint)
    check_dataset(plan, s3_ranges(s3, datasets_bucket), s3_sizes(s3, datasets_bucket))
    plan_key = keys.results_key(runs_prefix, keys.plan_key(run_id))
    execution = str(event.get("execution", ""))
    started = str(event.get("execution_started", ""))  # names are reused after 90 days
    frozen = dataclasses.replace(plan, run=RunOwner(run_id=run_id, execution=execution,
                                                    started=started))
    # The plan's conditional create claims the run (fasdl.run.run_claim); a refused start
    # writes nothing, so partitions and fence come after it.
    run_claim.check_fence_is_ours(s3, results_bucket, plan_key=plan_key, run_id=run_id,
                                  fence_key=keys.results_key(runs_prefix, keys.fence_key(run_id)),
                                  execution=execution, started=started)
    claimed = Plan.from_json(run_claim.claim_plan(
        s3, results_bucket, plan_key, frozen.to_json().encode(), run_id=run_id,
        execution=execution, started=started).decode())
    s3.put_object(Bucket=results_bucket,
                  Key=keys.results_key(runs_prefix, keys.partitions_key(run_id)),
                  Body=json.dumps(partition_layout(claimed)).encode(),
                  ContentType="application/json")
    return first_state(claimed, run_id, plan_key, epoch=issue_epoch(
        run_id, supersedes=None, call=f"start:{execution}"))


def load_run_plan(s3: Any, results_bucket: str, run: Mapping[str, Any]) -> Plan:
    try:
        text = s3.get_object(Bucket=results_bucket, Key=run["plan_key"])["Body"].read()
    except Exception as error:
        raise RunStateError(f"run state field 'run.plan_key': cannot read "
                            f"s3://{results_bucket}/{run['plan_key']}: {error}") from error
    return Plan.from_json(text.decode())
