"""Chaos trials: seeded fault schedules through the synthesized state machine, both channels.

``python -m bench.chaos [--trials N] [--seed S] [--workers W]`` plans one small job
(cnn-digits, 2 epochs in 2 segments), synthesizes it once per channel, runs the undisturbed
reference once per channel, beside the first trials (a trial needs it only to be judged), and N
trials one after the other (``python -m local run`` each, reusing the synth).
Every trial draws a channel and one to three faults of thirteen kinds (bench/chaos_schedule.py;
the first trials together cover every kind once).

A trial is ``identical`` (exit 0, model.npy bytes equal to its channel's reference), a
``clean_failure`` (exit 1, status FAILED, failure.json names the error, no model) or
``wrong`` (anything else: other weights, a timeout, a crashed runner, or a promise of its
faults broken: a key evicted from the capped cache, a second execution not refused with
``RunExists``, a late trigger call alone that fenced the live segment). The last line is the
JSON summary ``{"trials", "identical", "clean_failures", "wrong", "faults"}``; the goal is
``wrong == 0`` always. Only the channels the schedule and the references use are synthesized.

``--adaptive deadline|cost``: the job re-plans between segments (training.adaptive, the
planned W its ceiling): a decision is made once per boundary and recorded, and a faulted
trial must still end with the undisturbed adaptive run's weights. Far ahead of the shipped
profile's plan, ``cost`` changes to one worker at the first boundary.

``--smoke`` (or FASDL_BENCH_SMOKE=1, bench/smoke.py): one trial of W = 2 and one epoch in one
segment (tests/local/faults/test_chaos.py's job), seed 290: a torn frame planted and a second
execution started with the run id, on S3; the reference on S3 only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.chaos_schedule import CHANNELS, FAULTS, Shape, Trial, draw_trials
from bench.smoke import parse_args
from fasdl.contract.errors import RunExists
from fasdl.contract.plan import Plan
from fasdl.contract.training import ADAPTIVE_POLICIES
from infra.compute import TRIGGER_ID
from infra.settings import REPO_ROOT
from local.aws.template import synthesize
from local.run.run_options import RunOptions
from local.run.run_prep import prepare_dataset, prepare_plan
from planner.adapt import profiles_file
from planner.model.inputs.profiles import load_platform, load_prices, load_workload

OUTCOMES = ("identical", "clean_failure", "wrong")
EVICTED = "WARNING: the cache evicted"  # local/run/run_servers.py's cache_report
TRIGGER = TRIGGER_ID  # in the trigger function's name (its construct id)
KILLED = "Runtime.ExitError"  # an invocation the emulator killed
RUN_TIMEOUT_S = 300
SMOKE_SEED = 290  # its one trial on S3: a torn frame and a second start, no retry to wait for
Say = Callable[[str], None]


@dataclass(frozen=True)
class Job:
    """The job every trial trains: small, short, still K-REDUCE across two segments."""

    workers: int = 4
    epochs: int = 2
    segment_iterations: int = 22  # one epoch of cnn-digits at a global batch of 64
    adaptive: str = "off"  # training.adaptive: the run re-plans between segments


@dataclass(frozen=True)
class Prepared:
    plans: dict[str, Path]  # channel -> plan.json
    cdk_outs: dict[str, Path]  # channel -> its synthesized cdk.out
    iterations: int
    workers: int


# ---- runs -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    code: int
    output: str
    report: dict[str, Any] | None
    model: bytes | None
    seconds: float


def local_run(prepared: Prepared, channel: str, report_dir: Path, run_id: str,
              options: list[str]) -> Outcome:
    """One ``python -m local run`` of the job on ``channel``, reusing its synth."""
    began = time.monotonic()
    command = [sys.executable, "-m", "local", "run", "--plan", str(prepared.plans[channel]),
               "--cdk-out", str(prepared.cdk_outs[channel]), "--report-dir", str(report_dir),
               "--run-id", run_id, "--timeout", str(RUN_TIMEOUT_S), *options]
    try:
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S + 120, check=False)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as error:
        code, output = -1, f"no end within {RUN_TIMEOUT_S + 120} s: {error}"
    report_path, model_path = report_dir / "report.json", report_dir / "model.npy"
    report = json.loads(report_path.read_text()) if report_path.is_file() else None
    model = model_path.read_bytes() if model_path.is_file() else None
    return Outcome(code, output, report, model, time.monotonic() - began)


def broken_promise(trial: Trial, outcome: Outcome) -> str | None:
    """What the trial's faults promise beyond the weights, if broken: nothing evicted from the
    capped cache, the second execution refused with RunExists, a late trigger call alone
    costing the live segment nothing."""
    report = outcome.report or {}
    if EVICTED in outcome.output:
        return "the cache evicted keys at the planned cap"
    second = report.get("second_start")
    if "same_run_id" in trial.faults and (second or {}).get("error") != RunExists.__name__:
        return f"the second execution was not refused with RunExists: {second}"
    retried = [s.get("attempt") for s in report.get("segments", []) if s.get("attempt")]
    if set(trial.faults) == {"late_trigger"} and retried:
        return f"the late trigger call cost the live segment a retry ({errors_of(report)})"
    cut = [i for i in report.get("invocations", []) if TRIGGER in str(i.get("function"))
           and i.get("error") == KILLED]
    if "late_trigger" in trial.faults and cut:
        return "the late trigger call was killed at the run's end, before it went on"
    return None


def classify(outcome: Outcome, reference: bytes, trial: Trial) -> tuple[str, str]:
    """(identical | clean_failure | wrong, why)."""
    report = outcome.report or {}
    failure = report.get("failure") or {}
    if (broken := broken_promise(trial, outcome)) is not None:
        return "wrong", broken
    if outcome.code == 0 and outcome.model is not None:
        if outcome.model == reference:
            return "identical", "weights equal the reference's"
        return "wrong", "the run succeeded with other weights"
    if (outcome.code == 1 and outcome.model is None and report.get("status") == "FAILED"
            and failure.get("error")):
        return "clean_failure", f"{failure['error']}: {str(failure.get('cause', ''))[:160]}"
    return "wrong", (f"exit {outcome.code}, status {report.get('status')}, failure "
                     f"{failure.get('error')}; output tail: {outcome.output[-400:]!r}")


def errors_of(report: dict[str, Any] | None) -> dict[str, int]:
    """How often each invocation error occurred."""
    return dict(Counter(i["error"] for i in (report or {}).get("invocations", [])
                        if i.get("error")))


# ---- preparation ------------------------------------------------------------------------------
def plan_job(job: Job, work: Path) -> Plan:
    """Plan the job once (s3; another channel's plan differs only in its channel)."""
    quiet: Say = lambda text: None  # noqa: E731
    # planned static: an adaptive job's policy and ceiling are set below, on the planned W
    plan = prepare_plan(RunOptions(workers=job.workers, epochs=job.epochs,
                                   segment_iterations=job.segment_iterations, adaptive="off"),
                        work, quiet)
    plan, _ = prepare_dataset(plan, RunOptions(), work, quiet)
    if job.adaptive == "off":
        return plan
    # an adaptive run: the ceiling is the planned W, so a re-plan may use fewer workers, another
    # K or other batches; far ahead of the shipped profile's plan, policy cost scales in
    return replace(plan, training=replace(plan.training, adaptive=job.adaptive))


def write_profiles(plan: Plan, path: Path) -> None:
    """An adaptive plan's profiles beside it (the planner's own, as ``planner plan`` wrote
    them for the local job: the shipped workload, the channel's platform, the region's
    prices)."""
    profiles_file.write_profiles(plan, path, (
        load_workload(plan.workload.name),
        load_platform(plan.deployment.channel, plan.deployment.arch),
        load_prices(plan.deployment.region)))


def prepare(plan: Plan, work: Path, channels: tuple[str, ...], say: Say) -> Prepared:
    """The plan per channel, synthesized once per channel, the synths side by side."""
    plans: dict[str, Path] = {}
    for channel in channels:
        plans[channel] = work / f"plan-{channel}.json"
        plan.on_channel(channel).save(plans[channel])
        write_profiles(plan.on_channel(channel), plans[channel])
    began = time.monotonic()
    with ThreadPoolExecutor(len(channels)) as pool:
        synths = {c: pool.submit(synthesize, plans[c], work / f"cdk.out-{c}")
                  for c in channels}
        cdk_outs = {c: future.result().parent for c, future in synths.items()}
    say(f"planned W={plan.deployment.workers}, {plan.total_iterations} iterations in "
        f"{plan.segments} segments; synthesized {', '.join(channels)} in "
        f"{time.monotonic() - began:.0f} s")
    return Prepared(plans, cdk_outs, plan.total_iterations, plan.deployment.workers)


def references(prepared: Prepared, work: Path, channels: tuple[str, ...],
               say: Say) -> dict[str, bytes]:
    """The undisturbed weights per channel (a channel without its own run: the first's)."""
    found: dict[str, bytes] = {}
    for channel in channels:
        outcome = local_run(prepared, channel, work / f"reference-{channel}",
                            f"reference-{channel}", [])
        if outcome.code != 0 or outcome.model is None:
            raise RuntimeError(f"the undisturbed {channel} run failed (exit {outcome.code}):\n"
                               f"{outcome.output[-3000:]}")
        found[channel] = outcome.model
        say(f"reference on {channel}: {outcome.seconds:.0f} s")
    if len(set(found.values())) > 1:
        say("note: the channels' references differ; each trial compares to its channel's")
    first = found[channels[0]]
    return {channel: found.get(channel, first) for channel in CHANNELS}


# ---- trials -----------------------------------------------------------------------------------
def run_trials(trials: int, seed: int, job: Job, work: Path, say: Say, *,
               reference_channels: tuple[str, ...] = CHANNELS) -> dict[str, Any]:
    """Prepare, run ``trials`` schedules and return the summary (the bench's last line)."""
    began = time.monotonic()
    plan = plan_job(job, work)
    schedule = draw_trials(trials, seed, Shape(plan.total_iterations, plan.deployment.workers,
                                               plan.segments))
    used = {*reference_channels, *(trial.channel for trial in schedule)}
    prepared = prepare(plan, work, tuple(c for c in CHANNELS if c in used), say)
    outcomes: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    # the references beside the first trials: a trial needs them only to be judged
    with ThreadPoolExecutor(1) as pool:
        expected = pool.submit(references, prepared, work, reference_channels, say)
        for trial in schedule:
            faults.update(list(trial.faults))
            _trial(prepared, trial, (trials, seed), work, expected, outcomes, say)
    return {"trials": trials, "adaptive": job.adaptive, "identical": outcomes["identical"],
            "clean_failures": outcomes["clean_failure"], "wrong": outcomes["wrong"],
            "faults": {kind: faults[kind] for kind in FAULTS}, "seed": seed,
            "seconds": round(time.monotonic() - began, 1)}


def _trial(prepared: Prepared, trial: Trial, of: tuple[int, int], work: Path,
           expected: Future[dict[str, bytes]], outcomes: Counter[str], say: Say) -> None:
    """Run one trial (of ``(trials, seed)``), judge it against its channel's reference and
    say how it went."""
    trials, seed = of
    run_id = f"chaos-{seed}-{trial.index:03d}"
    outcome = local_run(prepared, trial.channel, work / run_id, run_id,
                        trial.options(work / run_id))
    verdict, why = classify(outcome, expected.result()[trial.channel], trial)
    outcomes[verdict] += 1
    attempts = [s.get("attempt") for s in (outcome.report or {}).get("segments", [])]
    say(f"trial {trial.index + 1}/{trials} [{trial.channel}] {trial.describe()}: "
        f"{verdict} in {outcome.seconds:.0f} s (segment attempts {attempts}, errors "
        f"{errors_of(outcome.report)}; {why})")
    injected = [line for line in outcome.output.splitlines()
                if line.startswith(("planted", "restarted", "storage fault",
                                    "started a second"))]
    for line in injected:
        say(f"    {line}")
    if verdict == "wrong":
        say(f"    wrong trial output:\n{outcome.output[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--trials", type=int, default=20, help="trials (default 20)")
    parser.add_argument("--seed", type=int, default=12, help="schedule seed (default 12)")
    parser.add_argument("--workers", type=int, default=Job.workers, help="W (default 4)")
    parser.add_argument("--keep", type=Path, help="keep every run's report folder here")
    parser.add_argument("--adaptive", choices=ADAPTIVE_POLICIES, default="off",
                        help="the job's training.adaptive: runs that re-plan between segments "
                             "(default off)")
    args = parse_args(parser, argv, trials=1, seed=SMOKE_SEED, workers=2)
    if args.trials < 1 or args.workers < 2:
        parser.error("--trials must be >= 1 and --workers >= 2")
    work = args.keep or Path(tempfile.mkdtemp(prefix="fasdl-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    job = (Job(workers=args.workers, epochs=1, adaptive=args.adaptive) if args.smoke
           else Job(workers=args.workers, adaptive=args.adaptive))
    try:
        summary = run_trials(args.trials, args.seed, job, work,
                             lambda text: print(text, flush=True),
                             reference_channels=("s3",) if args.smoke else CHANNELS)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(summary))
    return 0 if summary["wrong"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
