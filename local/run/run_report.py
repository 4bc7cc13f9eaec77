"""The end of a local run: wait for the execution, then write the report folder (report.json,
charts, the trained weights) from what the servers and the emulator hold, also for a run
that timed out or was interrupted."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasdl.contract.plan import Plan
from local.aws.adapter import LocalStepFunctions
from local.faults.injection import exchange_left
from local.lambda_.emulator import LambdaEmulator
from local.run.invocation_stats import annotate_report, format_limits
from local.run.report import Progress, build_report, format_summary, write_report
from local.run.run_limits import annotate_stop, format_stop, stop_status
from local.run.second_start import SecondStart
from local.servers.layout import LAYOUT
from local.servers.managed import RedisTlsClusterServer, ValkeyServer

Say = Callable[[str], None]
# a detached control call's longest wait: a late trigger call waits up to 60 s for its retry
DETACHED_CONTROL_S = 90.0


@dataclass(frozen=True)
class FinishedRun:
    """What the report of one run is built from."""

    plan: Plan
    run_id: str
    report_dir: Path
    client: Any  # the local S3's boto3 client
    results_bucket: str
    emulator: LambdaEmulator
    progress: Progress
    roles: dict[str, str]  # function name -> role (worker, trigger, finalize)
    worker_function: str
    cache: ValkeyServer | RedisTlsClusterServer | None
    memory_limit: bool
    started: float  # time.monotonic() when the execution started
    reference: list[dict[str, Any]] | None = None  # local.run.reference's curve, when asked for
    second_start: SecondStart | None = None  # --start-twice's execution, not the run's
    platform: str = "local"  # or LambdaEmulation.describe_platform(): what the run ran on

    def report(self, status: str, executions: list[dict[str, Any]], say: Say) -> None:
        # a trigger or finalize call whose Invoke failed runs to its end on AWS (a late
        # trigger call, bench.chaos); abandoned workers of a failed segment must not write on
        controls = {name for name, role in self.roles.items() if role != "worker"}
        if still := self.emulator.drain_detached(controls, DETACHED_CONTROL_S):
            say(f"{still} trigger/finalize call(s) whose Invoke failed still ran after "
                f"{DETACHED_CONTROL_S:.0f} s: stopped")
        self.emulator.shutdown()
        self.progress.poll()
        invocations = list(self.emulator.invocations)  # one snapshot: killed ones may land
        executions = self.own(executions)
        execution = executions[-1] if executions else {}
        status = stop_status(execution.get("error")) or status  # a guard's stop
        built = build_report(
            self.plan, run_id=self.run_id, channel=self.plan.deployment.channel, status=status,
            measured_s=time.monotonic() - self.started, results=self.progress.results,
            invocations=invocations, worker_function=self.worker_function,
            execution=execution,
            summary=self._json_object(LAYOUT.summary_key(self.run_id)),
            failure=self._json_object(LAYOUT.failure_key(self.run_id)))
        built["exchange_left"] = exchange_left(self.client, self.run_id, self.cache)
        built["reference"] = self.reference
        built["platform"] = self.platform
        built["second_start"] = (None if self.second_start is None
                                 else self.second_start.outcome())
        annotate_stop(built, self.client, self.results_bucket)
        annotate_report(built, invocations, self.roles, memory_limit=self.memory_limit)
        written = write_report(built, self.report_dir)
        if built["summary"] is not None:  # the trained weights, next to their report
            written += self._final_outputs(built["summary"])
        say(format_summary(built))
        say(format_limits(built))
        if (stopped := format_stop(built)) is not None:
            say(stopped)
        say(f"report: {', '.join(str(p) for p in written)}")

    def own(self, executions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The run's executions (continue-as-new included), not --start-twice's."""
        second = self.second_start
        return [e for e in executions if second is None or not second.is_second(e)]

    def _final_outputs(self, summary: dict[str, Any]) -> list[Path]:
        """model.npy (the flat vector the bitwise tests compare) and, when the run exported
        them, model.safetensors and model.json (python -m fasdl.evaluate reads those)."""
        keys = {"model.npy": summary["model_key"]}
        if summary.get("export_key"):
            keys.update({"model.safetensors": summary["export_key"],
                         "model.json": LAYOUT.final_key(self.run_id, "model.json")})
        paths = []
        for name, key in keys.items():
            path = self.report_dir / name
            self.client.download_file(self.results_bucket, key, str(path))
            paths.append(path)
        return paths

    def _json_object(self, key: str) -> dict[str, Any] | None:
        try:
            body = self.client.get_object(Bucket=self.results_bucket, Key=key)["Body"]
        except self.client.exceptions.NoSuchKey:
            return None
        data: dict[str, Any] = json.loads(body.read())
        return data


def wait_and_report(run: FinishedRun, sfn: LocalStepFunctions, machine: str, *,
                    timeout_s: float, on_poll: Callable[[], None], say: Say) -> str:
    """The execution's final status; the report is written whatever happens."""
    try:
        executions = run.own(sfn.wait(machine, timeout_s=timeout_s, poll_s=0.5,
                                      on_poll=on_poll))
        status = str(executions[-1]["status"])
    except TimeoutError:
        say(f"the run did not finish within --timeout {timeout_s:.0f} s: stopping")
        run.emulator.shutdown()
        sfn.stop_all(machine)
        executions, status = sfn.executions(machine), "TIMED_OUT"
    except BaseException:  # Ctrl-C: kill the invocations first, then unwind
        run.emulator.shutdown()
        sfn.stop_all(machine)
        try:  # what finished so far; the servers are still up
            run.report("INTERRUPTED", sfn.executions(machine), say)
        except Exception as error:  # the interrupt matters more than its report
            say(f"no partial report: {error}")
        raise
    run.report(status, executions, say)
    return status
