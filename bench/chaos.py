"""Chaos trials: seeded fault schedules through the synthesized state machine, both channels.

``python -m bench.chaos [--trials N] [--seed S] [--workers W]`` plans one small job
(cnn-digits, 2 epochs in 2 segments), synthesizes it once per channel, runs the undisturbed
reference once per channel, then N trials (``python -m local run`` each, reusing the synth).
Every trial draws a channel and one or two faults (:data:`FAULTS`; the first trials together
cover every kind once):

* ``killed``: a worker process exits at a random iteration (segment_runner's test hook);
* ``zombie``: an Invoke fails 10 s after the worker started while it keeps training slowly:
  the retry runs under a new epoch and the first attempt's workers must be fenced;
* ``duplicate``: the same, at full speed: the retried Invoke starts the worker twice;
* ``valkey_restart`` / ``s3_restart``: the Valkey (its keys are lost) or SeaweedFS (its objects
  survive) server restarts once the exchange reaches a random iteration;
* ``stale_frame``: a frame under an older epoch's identity planted where a live reader looks;
* ``truncated_frame``: a torn frame planted there (local/chaos_faults.py);
* ``trigger_retry``: the first trigger action's Invoke fails 10 s after it started, while the
  action, stalled 15 s between reading the fence and writing it, runs on: its retry issues
  the epoch, and the late write must fail rather than set the fence back (fasdl.run.fencing);
* ``cache_full``: the Valkey cache capped at the exchange's planned peak times the headroom
  (``--cache-at-peak``) with volatile-lru, as ElastiCache Serverless evicts: nothing live may
  be evicted;
* ``same_request_duplicate``: like ``duplicate``, but the retried Invoke runs under the first
  one's request id: only the claim's own nonce refuses the copy.

A trial is ``identical`` (exit 0, model.npy bytes equal to its channel's reference), a
``clean_failure`` (exit 1, status FAILED, failure.json names the error, no model) or
``wrong`` (anything else: other weights, a timeout, a crashed runner). The last line is the
JSON summary ``{"trials", "identical", "clean_failures", "wrong", "faults"}``; the goal is
``wrong == 0`` always. Only the channels the schedule and the references use are synthesized.

``--smoke`` (or FASDL_BENCH_SMOKE=1, bench/smoke.py): one trial of W = 2 and one epoch in one
segment (tests/local/test_chaos.py's job), seed 22: a stale and a torn frame planted on S3, the
reference on S3 only.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.smoke import parse_args
from fasdl.contract.plan import Plan
from fasdl.run.fault_hooks import FENCE_STALL_ENV
from infra.settings import REPO_ROOT
from local.chaos_faults import AHEAD
from local.runner import RunOptions, prepare_dataset, prepare_plan
from local.template import synthesize

FAULTS = ("killed", "zombie", "duplicate", "valkey_restart", "s3_restart", "stale_frame",
          "truncated_frame", "trigger_retry", "cache_full", "same_request_duplicate")
VALKEY_ONLY = ("valkey_restart", "cache_full")
FENCE_STALL_S = 15  # past the 10 s after which the first Invoke fails: the retry goes first
CHANNELS = ("s3", "valkey")
OUTCOMES = ("identical", "clean_failure", "wrong")
RUN_TIMEOUT_S = 300
PEER_WAIT = ("FASDL_PEER_WAIT_MIN_S", "3")  # peers of a dead worker give up within seconds
SMOKE_SEED = 22  # its one trial: stale_frame + truncated_frame on S3, no retry to wait for
Say = Callable[[str], None]


@dataclass(frozen=True)
class Job:
    """The job every trial trains: small, short, still K-REDUCE across two segments."""

    workers: int = 4
    epochs: int = 2
    segment_iterations: int = 22  # one epoch of cnn-digits at a global batch of 64


@dataclass(frozen=True)
class Prepared:
    plans: dict[str, Path]  # channel -> plan.json
    cdk_outs: dict[str, Path]  # channel -> its synthesized cdk.out
    iterations: int
    workers: int


@dataclass
class Trial:
    """One schedule: a channel, faults (kind -> description) and the run's options."""

    index: int
    channel: str
    faults: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    fence_stall_s: int = 0  # the trigger's (trigger_retry)

    def slow_down(self, seconds: float) -> None:
        """Sleep ``seconds`` per iteration (the largest asked for), so polls can catch up."""
        current = float(self.env.get("FASDL_TEST_ITERATION_DELAY_S", "0"))
        self.env["FASDL_TEST_ITERATION_DELAY_S"] = str(max(current, seconds))

    def options(self, report_dir: Path) -> list[str]:
        env = [f"worker:{key}={value}" for key, value in sorted(self.env.items())]
        if self.fence_stall_s:  # the marker: only the first trigger action stalls
            env.append(f"trigger:{FENCE_STALL_ENV}={self.fence_stall_s}:"
                       f"{report_dir}.fence-stall")
        return [*(a for item in env for a in ("--inject-env", item)), *self.args]

    def describe(self) -> str:
        return " + ".join(f"{kind}({text})" for kind, text in self.faults.items())


def _add_fault(trial: Trial, kind: str, rng: random.Random, iterations: int,
               workers: int) -> None:
    """The options that inject ``kind`` at a random point of the run."""
    at = rng.randrange(AHEAD + 1, iterations - 1)
    if kind == "killed":
        worker = rng.randrange(workers)
        trial.env.update({"FASDL_TEST_CRASH_AT_ITERATION": str(at),
                          "FASDL_TEST_CRASH_WORKER": str(worker)})
        trial.env.setdefault(*PEER_WAIT)
        trial.faults[kind] = f"worker {worker} at iteration {at}"
        return
    if kind == "trigger_retry":
        trial.args += ["--inject-service-error", "trigger:service-after-start:1"]
        trial.fence_stall_s = FENCE_STALL_S
        trial.faults[kind] = f"the first trigger action stalls {FENCE_STALL_S} s, retried"
        return
    if kind == "cache_full":
        trial.args += ["--cache-at-peak"]
        trial.faults[kind] = "the cache capped at the planned peak with volatile-lru"
        return
    if kind in ("zombie", "duplicate", "same_request_duplicate"):
        error = ("service-after-start-same-id" if kind == "same_request_duplicate"
                 else "service-after-start")
        trial.args += ["--inject-service-error", f"worker:{error}:1"]
        trial.env["FASDL_FENCE_CHECK_S"] = "1"
        trial.env.setdefault(*PEER_WAIT)
        if kind == "zombie":
            trial.slow_down(0.5)  # still training when the retry's epoch starts
        trial.faults[kind] = ("an Invoke fails 10 s after the worker started" +
                              (", which trains on slowly" if kind == "zombie" else "") +
                              (", retried under its request id"
                               if kind == "same_request_duplicate" else ""))
        return
    option = {"valkey_restart": "--restart-cache-at", "s3_restart": "--restart-s3-at",
              "stale_frame": "--plant-stale-frame", "truncated_frame": "--truncate-frame"}[kind]
    trial.args += [option, str(at)]
    trial.env.setdefault(*PEER_WAIT)
    trial.slow_down(0.1 if kind in ("stale_frame", "truncated_frame") else 0.05)
    trial.faults[kind] = f"at iteration {at}"


def draw_trials(count: int, seed: int, iterations: int, workers: int) -> list[Trial]:
    """``count`` schedules; the kinds are dealt round-robin from a shuffled list first (every
    kind appears once if count allows), then a trial with one fault may get a second."""
    rng = random.Random(seed)
    dealt = list(FAULTS)
    rng.shuffle(dealt)
    kinds: list[list[str]] = [dealt[i::count][:2] for i in range(count)]
    for chosen in kinds:
        if not chosen:
            chosen.append(rng.choice(FAULTS))
        if len(chosen) == 1 and rng.random() < 0.5:
            chosen.append(rng.choice([k for k in FAULTS if k != chosen[0]]))
    trials = []
    for index, chosen in enumerate(kinds):
        channel = ("valkey" if any(kind in VALKEY_ONLY for kind in chosen)
                   else rng.choice(CHANNELS))
        trial = Trial(index, channel)
        for kind in chosen:
            _add_fault(trial, kind, rng, iterations, workers)
        trials.append(trial)
    return trials


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


def classify(outcome: Outcome, reference: bytes) -> tuple[str, str]:
    """(identical | clean_failure | wrong, why)."""
    report = outcome.report or {}
    failure = report.get("failure") or {}
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
    plan = prepare_plan(RunOptions(workers=job.workers, epochs=job.epochs,
                                   segment_iterations=job.segment_iterations), work, quiet)
    plan, _ = prepare_dataset(plan, RunOptions(), work, quiet)
    return plan


def prepare(plan: Plan, work: Path, channels: tuple[str, ...], say: Say) -> Prepared:
    """The plan per channel, synthesized once per channel, the synths side by side."""
    plans: dict[str, Path] = {}
    for channel in channels:
        plans[channel] = work / f"plan-{channel}.json"
        plan.on_channel(channel).save(plans[channel])
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
    schedule = draw_trials(trials, seed, plan.total_iterations, plan.deployment.workers)
    used = {*reference_channels, *(trial.channel for trial in schedule)}
    prepared = prepare(plan, work, tuple(c for c in CHANNELS if c in used), say)
    expected = references(prepared, work, reference_channels, say)
    outcomes: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    for trial in schedule:
        faults.update(list(trial.faults))
        run_id = f"chaos-{seed}-{trial.index:03d}"
        outcome = local_run(prepared, trial.channel, work / run_id, run_id,
                            trial.options(work / run_id))
        verdict, why = classify(outcome, expected[trial.channel])
        outcomes[verdict] += 1
        attempts = [s.get("attempt") for s in (outcome.report or {}).get("segments", [])]
        say(f"trial {trial.index + 1}/{trials} [{trial.channel}] {trial.describe()}: "
            f"{verdict} in {outcome.seconds:.0f} s (segment attempts {attempts}, errors "
            f"{errors_of(outcome.report)}; {why})")
        injected = [line for line in outcome.output.splitlines()
                    if line.startswith(("planted", "restarted", "storage fault"))]
        for line in injected:
            say(f"    {line}")
        if verdict == "wrong":
            say(f"    wrong trial output:\n{outcome.output[-3000:]}")
    return {"trials": trials, "identical": outcomes["identical"],
            "clean_failures": outcomes["clean_failure"], "wrong": outcomes["wrong"],
            "faults": {kind: faults[kind] for kind in FAULTS}, "seed": seed,
            "seconds": round(time.monotonic() - began, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--trials", type=int, default=20, help="trials (default 20)")
    parser.add_argument("--seed", type=int, default=12, help="schedule seed (default 12)")
    parser.add_argument("--workers", type=int, default=Job.workers, help="W (default 4)")
    parser.add_argument("--keep", type=Path, help="keep every run's report folder here")
    args = parse_args(parser, argv, trials=1, seed=SMOKE_SEED, workers=2)
    if args.trials < 1 or args.workers < 2:
        parser.error("--trials must be >= 1 and --workers >= 2")
    work = args.keep or Path(tempfile.mkdtemp(prefix="fasdl-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    job = Job(workers=args.workers, epochs=1) if args.smoke else Job(workers=args.workers)
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
