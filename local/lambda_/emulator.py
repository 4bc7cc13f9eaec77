"""A Lambda emulator: sandbox processes, the function's environment, its timeout enforced.

Each invocation runs in a sandbox, ``python -m local.lambda_.invoke --serve`` (this venv's
interpreter) in the function's code dir, with exactly the function's environment plus the
variables the Lambda runtime sets (``AWS_LAMBDA_FUNCTION_NAME``, ``..._MEMORY_SIZE``,
``AWS_REGION``, ``_HANDLER``...). As on Lambda, an idle sandbox of the same function and
configuration is reused (a warm start: imports, module state and files kept), one idle for
``warm_idle_s`` is shut down, a timed-out, crashed or killed one never reused (sandbox.py);
each :class:`Invocation` says if it started cold. As Step Functions' Lambda task sees it:

* success: the handler's return value, JSON;
* the handler raised: a function error ``{"errorType": <exception class name>, ...}``;
* the timeout expired: the process group is killed and the error is ``Sandbox.Timedout``
  ("Task timed out after N.00 seconds"), which the workflow catches as a worker timeout;
* the process group used more than the memory size M: it is killed and the error is
  ``Runtime.OutOfMemory`` (local/lambda_/memory_watchdog.py; every invocation records its peak);
* the process died without a result: ``Runtime.ExitError``, like Lambda;
* an injected service error (local/faults/service_faults.py): the Invoke call fails, nothing runs.

With a :class:`~local.lambda_.lambda_speed.LambdaEmulation`, an invocation of memory M also gets
Lambda's resources: ceil(M/1769) threads, M/1769 CPUs (held from here, local/lambda_/throttle.py)
and channels shaped to the platform profile (in the child, local/lambda_/shaping.py). See
docs/emulation.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from infra.lambda_errors import EXIT, OUT_OF_MEMORY, TIMEOUT
from local.faults.service_faults import ServiceError, ServiceErrorKind, ServiceFault, kind_named
from local.lambda_.event_tags import action_of, log_tag, worker_of
from local.lambda_.invocation import FunctionSpec, Invocation
from local.lambda_.invoke import DEADLINE_ENV, PEAK_RSS_KEY, peak_before_call_kb
from local.lambda_.lambda_speed import LambdaEmulation
from local.lambda_.memory_watchdog import DEFAULT_TICK_S, MIB, MemoryWatchdog, report_lines
from local.lambda_.sandbox import DEFAULT_IDLE_S, Sandbox, SandboxPool, kill_group, sandbox_key
from local.lambda_.throttle import CpuThrottle, available_cores

# Inherited from this process so the child finds the venv and behaves; nothing AWS-specific.
_PASSTHROUGH_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "SYSTEMROOT")
_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass(frozen=True)
class _Ran:
    """A child process that has ended, and how."""

    spec: FunctionSpec
    request_id: str
    started: float
    duration_s: float
    code: int
    timed_out: bool
    watchdog: MemoryWatchdog
    result_file: Path
    log_path: Path


class LambdaEmulator:
    """Runs invocations of the given functions; thread-safe; :meth:`shutdown` kills them all.

    ``memory_limit`` (on by default, as on Lambda) kills an invocation whose processes use more
    than its memory size (local/lambda_/memory_watchdog.py); off, the peak is still measured.
    ``service_faults`` make the next invocations of a function fail with a service error
    without running anything (local/faults/service_faults.py); ``gate`` refuses an invocation as
    the function's state does (local/aws/control_plane.py).
    """

    def __init__(self, functions: Mapping[str, FunctionSpec], *, region: str = "us-east-1",
                 threads: int | None = None, log_dir: Path | None = None,
                 extra_env: Mapping[str, str] | None = None,
                 emulation: LambdaEmulation | None = None, memory_limit: bool = True,
                 memory_tick_s: float = DEFAULT_TICK_S,
                 service_faults: Iterable[ServiceFault] = (),
                 gate: Callable[[str], ServiceErrorKind | None] | None = None,
                 oom_error: str = OUT_OF_MEMORY,
                 warm_idle_s: float | None = DEFAULT_IDLE_S) -> None:
        self.functions = dict(functions)
        self.oom_error = oom_error  # Lambda has reported OOM kills as either name
        self.region = region
        self.threads = threads
        self.emulation = emulation
        self.memory_limit = memory_limit
        self.memory_tick_s = memory_tick_s
        self.extra_env = dict(extra_env or {})
        self._scratch = Path(tempfile.mkdtemp(prefix="fasdl-lambda-"))
        # absolute: a sandbox runs in its function's code directory, not in this one
        self.log_dir = (log_dir or self._scratch / "logs").resolve()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._running: dict[str, subprocess.Popen[bytes]] = {}
        # invocations whose caller got a service error while they ran on: (function, thread)
        self._detached: list[tuple[str, threading.Thread]] = []
        self._throttles: dict[str, CpuThrottle] = {}
        # function -> queued (error, action it waits for or None)
        self._faults: dict[str, deque[tuple[ServiceErrorKind, str | None]]] = {}
        self._reused_ids: dict[str, str] = {}  # function -> the request id its next call gets
        self._gate = gate  # function name -> how the Invoke API refuses it now (control_plane)
        self._closed = False
        self._pool = SandboxPool(warm_idle_s)  # None or 0: every invocation starts cold
        self.invocations: list[Invocation] = []
        for fault in service_faults:
            self.inject_service_error(fault.function, fault.kind, fault.count,
                                      action=fault.action)

    # ---- lookup ---------------------------------------------------------------------------
    def spec_for(self, function: str) -> FunctionSpec:
        """``function`` may be a name or an ARN (``...:function:<name>[:qualifier]``)."""
        name = function.split(":function:", 1)[-1].split(":", 1)[0]
        try:
            return self.functions[name]
        except KeyError:
            known = ", ".join(sorted(self.functions)) or "none"
            raise KeyError(f"no emulated Lambda function {name!r} (known: {known})") from None

    # ---- service errors -------------------------------------------------------------------
    def inject_service_error(self, function: str, error: str | ServiceErrorKind,
                             count: int = 1, *, action: str | None = None) -> None:
        """The next ``count`` invocations of ``function`` (with event ``action``, if given)
        fail with ``error`` (a :data:`~local.faults.service_faults.KINDS` name such as
        ``"throttled"``), after any queued."""
        kind = kind_named(error) if isinstance(error, str) else error
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        name = self.spec_for(function).name
        with self._lock:
            self._faults.setdefault(name, deque()).extend([(kind, action)] * count)

    def _take_fault(self, name: str, body: bytes) -> ServiceErrorKind | None:
        action = action_of(body)
        with self._lock:
            if self._closed:
                raise RuntimeError("the Lambda emulator is shut down")
            queue = self._faults.get(name, deque())
            for queued in queue:  # the first queued for this event's action, or for any
                if queued[1] in (None, action):
                    queue.remove(queued)
                    return queued[0]
        return self._gate(name) if self._gate is not None else None

    def _refused(self, spec: FunctionSpec, request_id: str, kind: ServiceErrorKind,
                 body: bytes, log_path: Path) -> Invocation:
        error = ServiceError(kind, request_id)
        ran = ("the handler started and runs on" if kind.after_start_s is not None
               else "no process was started")
        log_path.write_text(f"[local emulator] injected service error {kind.name}: "
                            f"{error.cause}\n[local emulator] the Invoke call failed: {ran}\n")
        return self._record(Invocation(
            spec.name, request_id, b"", None, kind.name, time.time(), 0.0, log_path,
            worker=worker_of(body), memory_mb=spec.memory_mb, service_error=error))

    # ---- invocation -----------------------------------------------------------------------
    def _environment(self, spec: FunctionSpec, deadline_ms: int) -> dict[str, str]:
        env = {key: os.environ[key] for key in _PASSTHROUGH_ENV if key in os.environ}
        env.update(spec.environment)
        env.update(self.extra_env)
        env.update({
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_FUNCTION_TIMEOUT": str(int(spec.timeout_s)),
            "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{spec.runtime}",
            "LAMBDA_TASK_ROOT": str(spec.code_dir), "_HANDLER": spec.handler,
            "PYTHONPATH": os.pathsep.join(map(str, (spec.code_dir, *spec.python_path))),
            "PYTHONUNBUFFERED": "1",
            DEADLINE_ENV: str(deadline_ms),
        })
        threads = self.threads
        if self.emulation is not None:
            fitted = self.emulation.threads(spec.memory_mb)
            threads = min(threads, fitted) if threads else fitted
            env.update(self.emulation.shaping_env(spec.memory_mb))
        if threads:
            env.update({key: str(threads) for key in _THREAD_ENV})
        return env

    def _throttle(self, spec: FunctionSpec, process: subprocess.Popen[bytes]) -> CpuThrottle | None:
        if self.emulation is None or not self.emulation.cpu:
            return None
        share = self.emulation.cpu_share(spec.memory_mb, spec.handler)
        return CpuThrottle(process.pid, share) if share < available_cores() else None

    def invoke(self, function: str, payload: bytes | str | dict[str, Any]) -> Invocation:
        spec = self.spec_for(function)
        if isinstance(payload, dict):
            payload = json.dumps(payload)
        body = payload.encode() if isinstance(payload, str) else payload
        with self._lock:
            reused = self._reused_ids.pop(spec.name, None)
        request_id = reused or str(uuid.uuid4())
        log_path = self.log_dir / (f"{spec.name}{log_tag(body)}-{request_id[:8]}"
                                   f"{'-again' if reused else ''}.log")
        kind = self._take_fault(spec.name, body)
        if kind is not None and kind.after_start_s is not None:
            return self._failed_after_start(spec, request_id, kind, body, log_path)
        if kind is not None:  # refused like the Invoke API would: nothing starts
            return self._refused(spec, request_id, kind, body, log_path)
        return self._run(spec, request_id, body, log_path)

    def _failed_after_start(self, spec: FunctionSpec, request_id: str, kind: ServiceErrorKind,
                            body: bytes, log_path: Path) -> Invocation:
        """The handler runs on in the background (recorded when it ends); the caller gets
        ``kind`` once it has run ``kind.after_start_s`` (local/faults/service_faults.py)."""
        detached = threading.Thread(target=self._run, args=(spec, request_id, body, log_path),
                                    name=f"detached-{request_id[:8]}", daemon=True)
        with self._lock:
            self._detached.append((spec.name, detached))
        detached.start()
        time.sleep(kind.after_start_s or 0.0)
        if kind.same_request_id:  # the Task's retry comes next, under this request id
            with self._lock:
                self._reused_ids[spec.name] = request_id
        return self._refused(spec, str(uuid.uuid4()), kind, body,
                             log_path.with_name(f"{log_path.stem}-caller.log"))

    def _run(self, spec: FunctionSpec, request_id: str, body: bytes,
             log_path: Path) -> Invocation:
        # a folder of its own, even for a retry that reuses a request id (service_faults)
        work = Path(tempfile.mkdtemp(prefix=f"{request_id}-", dir=self._scratch))
        event_file, result_file = work / "event.json", work / "result.json"
        event_file.write_bytes(body or b"{}")
        started = time.time()
        deadline_ms = int((started + spec.timeout_s) * 1000)
        request = {"event": str(event_file), "result": str(result_file),
                   "request_id": request_id, "log": str(log_path), "deadline_ms": deadline_ms}
        with log_path.open("ab") as log:  # append: the sandbox writes to it too
            sandbox, cold = self._sandbox(spec, log, deadline_ms)
            throttle, watchdog = self._hold(spec, request_id, sandbox)
            answered: bool | None = False
            try:
                answered = sandbox.serve(request, spec.timeout_s - (time.time() - started))
                if not answered:  # timed out, or died: nothing of it is reused
                    sandbox.kill(throttle.stop if throttle is not None else None)
            finally:
                self._release(request_id, watchdog, throttle, log)
            ran = _Ran(spec, request_id, started, time.time() - started,
                       sandbox.process.poll() or 0, answered is None, watchdog, result_file,
                       log_path)
            if cold:
                log.write(b"[local emulator] cold start: a new sandbox ran its Init\n")
            invocation = dataclasses.replace(self._outcome(ran, log), worker=worker_of(body),
                                             cold_start=cold)
        self._keep_or_discard(sandbox, invocation)
        return self._record(invocation)

    def _sandbox(self, spec: FunctionSpec, log: IO[bytes], deadline_ms: int
                 ) -> tuple[Sandbox, bool]:
        """An idle sandbox of this function and configuration, or a new one: (it, cold)."""
        env = self._environment(spec, deadline_ms)
        key = sandbox_key(spec.name, spec.handler, str(spec.code_dir), spec.memory_mb,
                          {name: value for name, value in env.items() if name != DEADLINE_ENV})
        warm = self._pool.take(key)
        with self._lock:
            if self._closed:
                if warm is not None:
                    warm.kill()
                raise RuntimeError("the Lambda emulator is shut down")
            if warm is not None:
                warm.reset_peak()  # before this invocation's watchdog samples it
                return warm, False
            command = [sys.executable, "-m", "local.lambda_.invoke", "--serve", spec.handler]
            return Sandbox.start(key, command, cwd=str(spec.code_dir), env=env, log=log), True

    def _hold(self, spec: FunctionSpec, request_id: str, sandbox: Sandbox
              ) -> tuple[CpuThrottle | None, MemoryWatchdog]:
        """The invocation's CPU cap and memory watchdog, registered for :meth:`shutdown`."""
        with self._lock:
            self._running[request_id] = sandbox.process
            throttle = self._throttle(spec, sandbox.process)
            if throttle is not None:
                self._throttles[request_id] = throttle.start()
            watchdog = MemoryWatchdog(sandbox.process.pid,
                                      spec.memory_mb if self.memory_limit else None,
                                      tick_s=self.memory_tick_s).start()
        return throttle, watchdog

    def _release(self, request_id: str, watchdog: MemoryWatchdog, throttle: CpuThrottle | None,
                 log: IO[bytes]) -> None:
        watchdog.stop()
        if throttle is not None:
            throttle.stop()  # never leave a stopped group behind
            log.write(f"[local emulator] CPU capped at {throttle.share:.2f} vCPU: held "
                      f"{throttle.stopped_s:.2f} s in {throttle.stops} stops\n".encode())
        with self._lock:
            self._running.pop(request_id, None)
            self._throttles.pop(request_id, None)

    def _keep_or_discard(self, sandbox: Sandbox, invocation: Invocation) -> None:
        """Lambda resets an environment after a crash, timeout, OOM or Init error."""
        error = invocation.error_type or ""
        reset = error.startswith("Runtime.") or error in (TIMEOUT, EXIT, self.oom_error)
        with self._lock:
            closed = self._closed
        if reset or closed or not sandbox.alive():
            sandbox.kill()
        else:
            self._pool.give_back(sandbox)

    def _record(self, invocation: Invocation) -> Invocation:
        with self._lock:
            self.invocations.append(invocation)
        return invocation

    def _outcome(self, ran: _Ran, log: IO[bytes]) -> Invocation:
        spec, request_id = ran.spec, ran.request_id
        outcome: dict[str, Any] | None = None
        if ran.result_file.is_file():
            outcome = json.loads(ran.result_file.read_text())
        # The child's own peak (VmHWM) covers the time after the watchdog's last sample; a
        # crash leaves no result, but the peak the child wrote before the call.
        reported = int(outcome.pop(PEAK_RSS_KEY, 0)) if outcome else 0
        peak = max(ran.watchdog.peak_bytes,
                   1024 * max(reported, peak_before_call_kb(ran.result_file)))
        over = self.memory_limit and peak > spec.memory_mb * MIB
        log.write(report_lines(ran.request_id, ran.duration_s, spec.memory_mb, ran.watchdog,
                               peak, over and not ran.timed_out).encode())

        def done(payload: dict[str, Any] | Any, error_type: str | None) -> Invocation:
            return Invocation(spec.name, request_id, json.dumps(payload).encode(),
                              "Unhandled" if error_type else None, error_type, ran.started,
                              ran.duration_s, ran.log_path, memory_mb=spec.memory_mb,
                              peak_rss_mb=round(peak / MIB, 1))

        if ran.timed_out:
            return done({"errorType": TIMEOUT,
                         "errorMessage": f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
                                         f" {request_id} Task timed out after "
                                         f"{spec.timeout_s:.2f} seconds"}, TIMEOUT)
        if ran.watchdog.killed or over:  # Lambda kills the runtime at the limit
            return done({"errorType": self.oom_error,
                         "errorMessage": f"RequestId: {request_id} Error: Runtime exited with "
                                         "error: signal: killed"}, self.oom_error)
        if outcome is None:
            return done({"errorType": EXIT,
                         "errorMessage": f"RequestId: {request_id} Error: Runtime exited with "
                                         f"error: exit status {ran.code}"}, EXIT)
        if "result" in outcome:
            return done(outcome["result"], None)
        return done(outcome, str(outcome.get("errorType", "Unhandled")))

    # ---- lifecycle ------------------------------------------------------------------------
    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def drain_detached(self, functions: set[str], timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for the detached invocations of ``functions`` (their
        Invoke failed while they ran on: on AWS they run to their end, whatever the execution
        does); returns how many still run."""
        with self._lock:
            threads = [thread for name, thread in self._detached if name in functions]
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return sum(thread.is_alive() for thread in threads)

    def shutdown(self) -> None:
        """Refuse new invocations and kill the running ones (their callers see an error)."""
        with self._lock:
            self._closed = True
            processes = [(process, self._throttles.get(request_id))
                         for request_id, process in self._running.items()]
        for process, throttle in processes:
            kill_group(process, throttle.stop if throttle is not None else None)
        self._pool.close()

    def cleanup(self) -> None:
        import shutil

        self.shutdown()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> LambdaEmulator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()
