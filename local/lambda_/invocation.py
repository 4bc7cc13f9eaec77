"""One Lambda function and one finished invocation of it, as the emulator (emulator.py) runs
it and as the rest of local/ reads it: the Step Functions stand-in (local/aws/adapter.py), the
Lambda and CloudWatch Logs stand-ins, the template that builds the specs, the run's report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from infra.lambda_errors import OUT_OF_MEMORY, TIMEOUT
from infra.lambda_runtime import PYTHON_RUNTIME
from local.faults.service_faults import ServiceError


@dataclass(frozen=True)
class FunctionSpec:
    """What the emulator needs of one Lambda function (read from the synthesized template)."""

    name: str
    handler: str  # module.function, relative to code_dir
    code_dir: Path
    timeout_s: float
    memory_mb: int = 128
    environment: Mapping[str, str] = field(default_factory=dict)
    runtime: str = PYTHON_RUNTIME  # the template's Runtime; names the execution environment
    python_path: tuple[Path, ...] = ()  # layers' python/ folders, after the code (as Lambda)


@dataclass(frozen=True)
class Invocation:
    """One finished invocation: the payload Step Functions receives and what happened."""

    function: str
    request_id: str
    payload: bytes  # empty for a service error: the function never answered
    function_error: str | None  # "Unhandled" when the payload is an error object
    error_type: str | None  # the function error's errorType, or the service error's name
    started: float  # time.time() at start
    duration_s: float
    log_path: Path | None
    worker: int | None = None  # the event's "worker", for per-worker reports
    memory_mb: int | None = None  # the function's memory size M
    peak_rss_mb: float | None = None  # the process group's peak (MiB); None: nothing ran
    cold_start: bool | None = None  # a new sandbox ran its Init; None: nothing ran
    service_error: ServiceError | None = None  # injected: the Invoke call failed, nothing ran

    @property
    def timed_out(self) -> bool:
        return self.error_type == TIMEOUT

    @property
    def out_of_memory(self) -> bool:
        return self.error_type == OUT_OF_MEMORY
