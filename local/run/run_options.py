"""What ``python -m local run`` is asked to do (local/__main__.py parses it, local/run/runner.py
runs it): the plan or the job to plan, the run's limits, and the faults to inject."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from infra.lambda_errors import OUT_OF_MEMORY
from local.aws.cache_plane import CacheStackState
from local.aws.control_plane import AccountOptions
from local.faults.chaos_faults import StorageFaults
from local.faults.service_faults import ServiceFault

DEFAULT_WORKLOAD = "cnn-digits"
DEFAULT_WORKERS = 4  # a planned job of a workload local.run.jobs does not list
DEFAULT_EPOCHS = 10
DEFAULT_SEGMENTS = 10  # at most: enough to show the loop and resumes, few enough to be quick


@dataclass(frozen=True)
class RunOptions:
    plan: Path | None = None
    channel: str | None = None  # default: the plan's, or s3 when planning
    epochs: int | None = None
    workers: int | None = None
    timeout_s: float = 900.0  # the whole run, wall clock
    workers_timeout_s: float | None = None  # kill workers sooner than the synthesized Timeout
    report_dir: Path | None = None
    dataset_dir: Path | None = None  # x.npy, y.npy, test/{x,y}.npy; default: built digits
    cdk_out: Path | None = None  # an existing synth of the same plan
    segment_iterations: int | None = None  # planned job default: whole_epoch_segments
    workload: str = DEFAULT_WORKLOAD  # what a planned job plans (a shipped workload name)
    threads: int | None = 1  # CPU threads per invocation (torch/OpenMP)
    tls_cache: bool = False  # valkey channel: redis-server 7 with TLS instead of valkey-server
    run_id: str | None = None
    inject_env: tuple[tuple[str, str, str], ...] = ()  # (role, key, value)
    restart_cache_at: int | None = None  # valkey: restart it once iteration N's shards appear
    cache_at_peak: bool = False  # valkey: cap at the planned peak, not the GB it rounds up to
    emulate_lambda: str | None = None  # Lambda CPU + bandwidth: "default", a profile name/path
    cpu_slower: float = 1.0  # with emulate_lambda: compute this many times slower
    memory_limit: bool = True  # kill an invocation past its memory size, as Lambda does
    oom_error: str = OUT_OF_MEMORY  # how such a kill is reported (or Runtime.ExitError)
    # Reuse an idle sandbox this long (0: every start cold, the default for now: a warm worker
    # after a handler error was seen at twice its real memory, not yet understood)
    warm_idle_s: float = 0.0
    inject_service_errors: tuple[ServiceFault, ...] = ()  # function = role (worker...)
    account: AccountOptions = field(default_factory=AccountOptions)  # control_plane.py
    cache_stack: CacheStackState = field(default_factory=CacheStackState)  # cache_plane.py
    storage_faults: StorageFaults = field(default_factory=StorageFaults)  # chaos_faults.py
    start_twice: bool = False  # a second execution with the run's id (second_start.py)
    reference: bool = False  # train the single-process reference first and plot it
    budget_usd: float | None = None  # instead of the plan's limits (local/run/run_limits.py)
    deadline_s: float | None = None
    keep: Path | None = None  # copy what a resume needs here when the run ends (kept_run.py)
    resume: Path | None = None  # continue the guard-stopped run kept there
    adaptive: str | None = None  # a planned job's policy; None: planner plan's default
