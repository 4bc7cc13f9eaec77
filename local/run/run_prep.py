"""Before a local run starts any server: the plan (read or planned, the options applied), the
dataset files it uploads and the synthesized template it runs, each checked against the
others (:class:`~local.faults.injection.InputError`: exit 2)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fasdl.contract.plan import Plan
from fasdl.contract.training import profiles_path
from local.aws.template import (
    LocalTemplate,
    TemplateError,
    load_template,
    synthesize,
    training_template,
)
from local.faults.injection import InputError
from local.run.jobs import local_job, missing_dataset_hint
from local.run.run_options import (
    DEFAULT_EPOCHS,
    DEFAULT_SEGMENTS,
    DEFAULT_WORKERS,
    RunOptions,
)

Say = Callable[[str], None]
PLANNED_NAME = "planned.json"  # a planned job's plan, as planner plan wrote it (and its profiles)


# ---- plan -------------------------------------------------------------------------------------
def _planned_defaults(options: RunOptions) -> tuple[int, int]:
    """(epochs, workers) of a planned job: the options', else the shipped local job's."""
    job = local_job(options.workload)
    return (options.epochs or (job.epochs if job else DEFAULT_EPOCHS),
            options.workers or (job.workers if job else DEFAULT_WORKERS))


def _planner_plan(options: RunOptions, out: Path, say: Say) -> dict[str, Any]:
    epochs, workers = _planned_defaults(options)
    command = [sys.executable, "-m", "planner", "plan", "--workload", options.workload,
               "--deadline", "900", "--max-global-batch", "64", "--epochs", str(epochs),
               "--min-workers", str(workers),
               "--channel", options.channel or "s3", "--timeout", "300", "--out", str(out)]
    if options.adaptive is not None:
        command += ["--adaptive", options.adaptive]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise InputError(f"the planner failed:\n{done.stderr.strip() or done.stdout.strip()}")
    say(done.stdout.rstrip())
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def prepare_plan(options: RunOptions, work: Path, say: Say) -> Plan:
    """The plan to run, with the options applied and validated (PlanError → exit 2)."""
    if options.plan is not None:
        if options.adaptive is not None:
            raise InputError("--adaptive plans a job: with --plan the plan's training.adaptive "
                             "is the policy (plan again, or replace it in the execution input)")
        try:
            data = json.loads(options.plan.read_text())
        except (OSError, ValueError) as error:
            raise InputError(f"cannot read plan {options.plan}: {error}") from error
        if not isinstance(data, dict):
            raise InputError(f"plan {options.plan}: expected a JSON object")
        Plan.from_dict(data)  # a corrupt plan fails here, before any override hides it
    else:
        data = _planner_plan(options, work / PLANNED_NAME, say)
    deployment, training = data.get("deployment", {}), data.get("training", {})
    wanted = options.workers or (None if options.plan else _planned_defaults(options)[1])
    if wanted is not None and deployment.get("workers") != wanted:
        raise InputError(f"W mismatch: the plan has deployment.workers="
                         f"{deployment.get('workers')} but W={wanted} was asked for")
    if options.epochs:
        training["epochs"] = options.epochs
    if options.segment_iterations:
        training["segment_iterations"] = options.segment_iterations
    plan = Plan.from_dict(data)
    return _on_channel(plan, options.channel, say) if options.channel else plan


def _on_channel(plan: Plan, channel: str, say: Say) -> Plan:
    """``plan`` moved to ``channel`` (Plan.on_channel); an adaptive plan's re-plan profiles
    are for the planned channel, so there it keeps its plan, and says so."""
    if channel != plan.deployment.channel and plan.training.adaptive != "off":
        say(f"the plan's re-plan profiles are for {plan.deployment.channel}: on {channel} the "
            "run keeps its plan (training.adaptive off; plan on that channel to adapt)")
        plan = dataclasses.replace(
            plan, training=dataclasses.replace(plan.training, adaptive="off"),
            deployment=dataclasses.replace(plan.deployment, workers_max=None))
    return plan.on_channel(channel)


def copy_profiles(source: Path | None, plan_path: Path) -> None:
    """An adaptive plan's profiles (fasdl.contract.training) beside the plan the run synthesizes
    from; synth refuses an adaptive plan without them, naming the path."""
    if source is None:
        return
    profiles = profiles_path(source)
    if profiles.is_file():
        shutil.copyfile(profiles, profiles_path(plan_path))


def whole_epoch_segments(plan: Plan) -> Plan:
    """Segments of whole epochs, at most :data:`DEFAULT_SEGMENTS` (one per epoch for short
    jobs): the loop, the checkpoints and the progress all show."""
    data = plan.to_dict()
    epochs_per_segment = -(-plan.training.epochs // DEFAULT_SEGMENTS)
    data["training"]["segment_iterations"] = max(1, plan.iterations_per_epoch) * \
        epochs_per_segment
    return Plan.from_dict(data)


# ---- dataset ----------------------------------------------------------------------------------
def prepare_dataset(plan: Plan, options: RunOptions, work: Path,
                    say: Say) -> tuple[Plan, dict[str, Path]]:
    """Object key suffix → local file (``"x.npy"``, ``"test/y.npy"``...), and the plan; a
    planned job's sample count is fitted to the train split."""
    root = options.dataset_dir
    if root is None:
        job = local_job(plan.workload.name, plan.workload.dataset)
        if job is None:
            raise InputError(f"missing dataset: workload {plan.workload.name!r} "
                             f"({plan.workload.dataset}) has no dataset built here; "
                             f"{missing_dataset_hint()}")
        say(f"building the {plan.workload.name} dataset")
        root = job.build_dataset(work / "dataset")
    base = root / "train" if (root / "train" / "x.npy").is_file() else root
    files = {"x.npy": base / "x.npy", "y.npy": base / "y.npy",
             "test/x.npy": root / "test" / "x.npy", "test/y.npy": root / "test" / "y.npy"}
    for name in ("x.npy", "y.npy"):
        if not files[name].is_file():
            raise InputError(f"missing dataset: {files[name]} not found")
    files = {name: path for name, path in files.items() if path.is_file()}
    files.update(_initial_weights(plan, root, base))
    try:
        rows = [np.load(files[n], mmap_mode="r", allow_pickle=False).shape[0]
                for n in ("x.npy", "y.npy")]
    except (OSError, ValueError) as error:
        raise InputError(f"unreadable dataset in {base}: {error}") from error
    if options.plan is None and rows[0] == rows[1] < plan.workload.samples:
        # cnn-digits' profile counts all 1797 digits; training uses the train split.
        say(f"note: the train split holds {rows[0]} rows; the plan's workload.samples "
            f"{plan.workload.samples} is set to {rows[0]}")
        data = plan.to_dict()
        data["workload"]["samples"] = rows[0]
        plan = Plan.from_dict(data)
    if rows[0] != rows[1] or rows[0] < plan.workload.samples:
        raise InputError(f"dataset {base}: x has {rows[0]} rows, y {rows[1]}; the plan trains "
                         f"on workload.samples={plan.workload.samples}")
    return plan, files


def _initial_weights(plan: Plan, root: Path, base: Path) -> dict[str, Path]:
    """The plan's initial weights, uploaded with the dataset as on AWS (``aws s3 sync`` of the
    train folder): a key under the dataset's prefix, the file in the train folder."""
    key = plan.workload.initial_weights
    if key is None:
        return {}
    prefix = plan.workload.dataset.rstrip("/") + "/"
    if not key.startswith(prefix):
        raise InputError(f"workload.initial_weights: {key} must be under the dataset's prefix "
                         f"{prefix} for a local run (put the file in the train folder)")
    name = key.removeprefix(prefix)
    found = [folder / name for folder in (base, root) if (folder / name).is_file()]
    if not found:
        raise InputError(f"workload.initial_weights: {name} not found in {base}")
    return {name: found[0]}


# ---- template ---------------------------------------------------------------------------------
def prepare_template(plan: Plan, plan_path: Path, options: RunOptions, work: Path,
                     say: Say) -> LocalTemplate:
    if options.cdk_out is not None:
        try:
            path = training_template(options.cdk_out)
        except TemplateError as error:
            raise InputError(f"--cdk-out: {error}") from error
    else:
        began = time.monotonic()
        path = synthesize(plan_path, work / "cdk.out")
        say(f"synthesized {path.name} with `npx cdk synth` in {time.monotonic() - began:.1f} s")
    template = load_template(path, region=plan.deployment.region)
    trigger = template.functions[template.function_named("handlers.trigger")]
    deployed = trigger.environment.get("FASDL_DEPLOYMENT")
    if deployed != plan.deployment_fingerprint():
        raise InputError(f"the plan is for another stack: its deployment is "
                         f"{plan.deployment_fingerprint()}, the template's {deployed}")
    train = template.definition["States"].get("Train segment", {})
    if train.get("MaxConcurrency") != plan.deployment.ceiling:
        raise InputError(f"W mismatch: the state machine runs {train.get('MaxConcurrency')} "
                         f"workers at once, the plan has W={plan.deployment.ceiling}")
    return template


def plan_text(plan: Plan) -> str:
    d, t, p = plan.deployment, plan.training, plan.prediction
    lines = [f"Configuration: {plan.workload.name} ({plan.workload.model} on "
             f"{plan.workload.dataset}, {plan.workload.samples} samples), {d.channel} channel",
             f"  W={d.workers} M={d.memory_mb} MB K={t.aggregators} B^a={t.batch_aggregator} "
             f"B^n={t.batch_non_aggregator} sync={t.sync}, {t.epochs} epochs = "
             f"{plan.total_iterations} iterations in {plan.segments} segment(s) of "
             f"<= {t.segment_iterations}, Lambda timeout {d.timeout_s} s"]
    if p is not None:
        lines.append(f"  predicted on AWS Lambda: {p.time_s:.1f} s, ${p.cost_usd:.4f}")
    return "\n".join(lines)
