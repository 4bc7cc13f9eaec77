"""The chaos trials' schedules (bench/chaos.py runs them): which faults each trial injects and
the ``python -m local run`` options and worker or trigger environment that inject them.

* ``killed``: a worker process exits at a random iteration (segment_runner's test hook);
* ``zombie``: an Invoke fails 10 s after the worker started while it keeps training slowly:
  the retry runs under a new epoch and the first attempt's workers must be fenced;
* ``duplicate``: the same, at full speed: the retried Invoke starts the worker twice;
* ``valkey_restart`` / ``s3_restart``: the Valkey (its keys are lost) or SeaweedFS (its objects
  survive) server restarts once the exchange reaches a random iteration;
* ``stale_frame``: a frame under an older epoch's identity planted where a live reader looks;
* ``truncated_frame``: a torn frame planted there (local/faults/chaos_faults.py);
* ``trigger_retry``: the first trigger action's Invoke fails 10 s after it started, while the
  action, stalled 15 s between reading the fence and writing it, runs on: its retry issues
  the epoch, and the late write must fail rather than set the fence back (fasdl.run.fencing);
* ``cache_full``: the Valkey cache capped at the exchange's planned peak times the headroom
  (``--cache-at-peak``) with volatile-lru, as ElastiCache Serverless evicts: nothing live may
  be evicted;
* ``same_request_duplicate``: like ``duplicate``, but the retried Invoke runs under the first
  one's request id: only the claim's own nonce refuses the copy;
* ``same_run_id``: a second execution with the running one's run id, started once the first
  issued its epoch (``--start-twice``, local/run/second_start.py): it must fail with ``RunExists``
  and leave the first's run alone;
* ``late_trigger``: the first ``next`` action (``start`` in a one-segment job) waits before it
  reads the fence while its Invoke fails after 10 s: the retry issues the epoch and the
  segment starts, then the late call goes on and must issue nothing (fasdl.run.fencing);
* ``zombie_leftovers``: a ``zombie`` whose attempt's workers check the fence only every 6 s,
  on a Valkey capped at the planned peak: they write into their dead epoch after the next
  epoch's worker 0 cleaned it, and must delete it themselves; nothing may be evicted.

Each kind's options are local/__main__.py's fault options; the environment variables are
fasdl.run.fault_hooks' and the runtime's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from fasdl.run.fault_hooks import FENCE_STALL_ENV, LATE_CALL_ENV
from local.faults.chaos_faults import AHEAD

FAULTS = ("killed", "zombie", "duplicate", "valkey_restart", "s3_restart", "stale_frame",
          "truncated_frame", "trigger_retry", "cache_full", "same_request_duplicate",
          "same_run_id", "late_trigger", "zombie_leftovers")
VALKEY_ONLY = ("valkey_restart", "cache_full", "zombie_leftovers")
FENCE_STALL_S = 15  # past the 10 s after which the first Invoke fails: the retry goes first
LATE_CALL_S = 60  # the late call's longest wait for its retry's issue (fasdl.run.fault_hooks)
CHANNELS = ("s3", "valkey")
PEER_WAIT = ("FASDL_PEER_WAIT_MIN_S", "3")  # peers of a dead worker give up within seconds


@dataclass(frozen=True)
class Shape:
    """What a schedule needs to know of the planned job."""

    iterations: int
    workers: int
    segments: int


@dataclass
class Trial:
    """One schedule: a channel, faults (kind -> description) and the run's options."""

    index: int
    channel: str
    faults: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    fence_stall_s: int = 0  # the trigger's (trigger_retry)
    late_call: str = ""  # the trigger's: <seconds>@<action> (late_trigger)

    def slow_down(self, seconds: float) -> None:
        """Sleep ``seconds`` per iteration (the largest asked for), so polls can catch up."""
        current = float(self.env.get("FASDL_TEST_ITERATION_DELAY_S", "0"))
        self.env["FASDL_TEST_ITERATION_DELAY_S"] = str(max(current, seconds))

    def options(self, report_dir: Path) -> list[str]:
        env = [f"worker:{key}={value}" for key, value in sorted(self.env.items())]
        if self.fence_stall_s:  # the marker: only the first trigger action stalls
            env.append(f"trigger:{FENCE_STALL_ENV}={self.fence_stall_s}:"
                       f"{report_dir}.fence-stall")
        if self.late_call:
            env.append(f"trigger:{LATE_CALL_ENV}={self.late_call}:{report_dir}.late-call")
        return [*(a for item in env for a in ("--inject-env", item)), *self.args]

    def describe(self) -> str:
        return " + ".join(f"{kind}({text})" for kind, text in self.faults.items())


def _add_fault(trial: Trial, kind: str, rng: random.Random, shape: Shape) -> None:
    """The options that inject ``kind`` at a random point of the run."""
    iterations, workers = shape.iterations, shape.workers
    at = rng.randrange(AHEAD + 1, iterations - 1)
    if kind in ("same_run_id", "late_trigger"):
        _add_trigger_fault(trial, kind, shape)
        return
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
    if kind in ("zombie", "duplicate", "same_request_duplicate", "zombie_leftovers"):
        _add_worker_copy(trial, kind)
        return
    option = {"valkey_restart": "--restart-cache-at", "s3_restart": "--restart-s3-at",
              "stale_frame": "--plant-stale-frame", "truncated_frame": "--truncate-frame"}[kind]
    trial.args += [option, str(at)]
    trial.env.setdefault(*PEER_WAIT)
    trial.slow_down(0.1 if kind in ("stale_frame", "truncated_frame") else 0.05)
    trial.faults[kind] = f"at iteration {at}"


def _add_worker_copy(trial: Trial, kind: str) -> None:
    """A worker's Invoke fails after it started: the retry runs a second copy (and, for the
    zombie kinds, the first trains on slowly into the next attempt's epoch)."""
    error = ("service-after-start-same-id" if kind == "same_request_duplicate"
             else "service-after-start")
    trial.args += ["--inject-service-error", f"worker:{error}:1"]
    if kind == "zombie_leftovers":  # rare fence checks: the zombies write after the cleanup
        trial.env["FASDL_FENCE_CHECK_S"] = "6"
        trial.args += ["--cache-at-peak"]
        trial.slow_down(0.3)
    trial.env.setdefault("FASDL_FENCE_CHECK_S", "1")
    trial.env.setdefault(*PEER_WAIT)
    if kind == "zombie":
        trial.slow_down(0.5)  # still training when the retry's epoch starts
    trial.faults[kind] = ("an Invoke fails 10 s after the worker started" +
                          (", which trains on slowly" if "zombie" in kind else "") +
                          (", fence checks every 6 s, the cache capped at the planned peak"
                           if kind == "zombie_leftovers" else "") +
                          (", retried under its request id"
                           if kind == "same_request_duplicate" else ""))


def _add_trigger_fault(trial: Trial, kind: str, shape: Shape) -> None:
    if kind == "same_run_id":
        trial.args += ["--start-twice"]
        trial.faults[kind] = "a second execution with the run id once epoch 1 is issued"
        return
    action = "next" if shape.segments > 1 else "start"
    trial.args += ["--inject-service-error", f"trigger@{action}:service-after-start:1"]
    trial.late_call = f"{LATE_CALL_S}@{action}"
    trial.faults[kind] = (f"the first {action} waits before it reads the fence until its "
                          "retry issued the epoch, its Invoke failing after 10 s")


def draw_trials(count: int, seed: int, shape: Shape) -> list[Trial]:
    """``count`` schedules; the kinds are dealt round-robin from a shuffled list first (every
    kind appears once if count allows: up to three in a trial), then a trial with one fault
    may get a second."""
    rng = random.Random(seed)
    dealt = list(FAULTS)
    rng.shuffle(dealt)
    per_trial = 3 if count * 3 >= len(FAULTS) else 2  # three only where needed to cover all
    kinds: list[list[str]] = [dealt[i::count][:per_trial] for i in range(count)]
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
            _add_fault(trial, kind, rng, shape)
        trials.append(trial)
    return trials
