"""The synthesized state machine at the W the planner offers, with stub Lambdas: do the states
stay inside AWS's limits (256 KiB per state input/output, 25,000 history events)?

``python -m bench.orchestration [--workers 1000] [--segments 4] [--sleep-ms 5]
[--segments-per-execution 3]`` synthesizes the default plan widened to W workers
(``npx cdk synth``; W > 40 takes the Distributed Map), runs it in moto's ASL interpreter
(local/aws/adapter.py) with every Lambda answered in-process: a worker claims its slot (a second
copy would be WorkerDuplicate), sleeps a few ms, writes its result JSON to a real SeaweedFS
server and returns; worker 7 of segment 1 dies once (Runtime.ExitError: ``retry``) and worker 3
of segment 2 times out once (Sandbox.Timedout: ``shorten``). The trigger's ``outcome`` action
is the real one (fasdl.run.segment_outcome), and finalize reads every result with the real
parallel reader (fasdl.run.results). "More segments?" continues as new every
``--segments-per-execution`` segment attempts, so the histories of several executions are
measured; moto names every continued execution "None", so locally a run may continue only
once (the defaults: 6 attempts, one continue).

Reports the largest state input/output and Lambda payload, the history events of each
execution, and the trigger's and finalize's durations. The last line is one JSON object:
``{"workers", "segments", "max_payload_kib", "max_history_events", "finalize_s", "ok", ...}``.
``--smoke`` (or FASDL_BENCH_SMOKE=1, bench/smoke.py): W = 41, the smallest that takes the
Distributed Map, 3 segments of 1-ms workers, still continued as new once.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.smoke import parse_args
from fasdl.contract.errors import WorkerDuplicate
from fasdl.contract.events import OUTCOME_ACTION
from fasdl.contract.settings import Settings
from fasdl.run import results, segment_outcome
from infra import lambda_errors, workflow
from infra.settings import REPO_ROOT
from local.aws.adapter import LocalStepFunctions
from local.aws.template import load_template, synthesize
from local.servers.managed import SeaweedS3Server

PAYLOAD_LIMIT_KIB = 256
HISTORY_LIMIT = 25_000
CRASH_AT = (1, 7)  # (segment, worker), attempt 0: the process dies -> retry
TIMEOUT_AT = (2, 3)  # (segment, worker), attempt 0: the function times out -> shorten
BUCKET = "fasdl"


class InjectedError(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass
class Stubs:
    """Trigger, worker and finalize in-process, per fasdl/contract/events.py."""

    workers: int
    segments: int
    sleep_s: float
    s3: Any
    settings: Settings
    lock: threading.Lock = field(default_factory=threading.Lock)
    claims: set[tuple[int, int]] = field(default_factory=set)
    durations: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    actions: list[str] = field(default_factory=list)
    max_lambda_bytes: int = 0
    epoch: int = 0

    def route(self, function: str, payload: bytes) -> tuple[bytes, str | None]:
        event = json.loads(payload)
        role = next(r for r in ("Trigger", "Worker", "Finalize") if r in function)
        started = time.perf_counter()
        function_error: str | None = None
        try:
            body = getattr(self, role.lower())(event)
        except InjectedError as error:  # as Lambda reports a function error
            body = {"errorType": error.name, "errorMessage": "injected"}
            function_error = "Unhandled"
        elapsed = time.perf_counter() - started
        answer = json.dumps(body).encode()
        with self.lock:
            if role != "Worker":
                self.durations[f"{role.lower()}.{event['action']}"].append(elapsed)
                self.actions.append(f"{role.lower()}.{event['action']}")
            self.max_lambda_bytes = max(self.max_lambda_bytes, len(payload), len(answer))
        return answer, function_error

    def _new_epoch(self) -> int:
        with self.lock:
            self.epoch += 1
            return self.epoch

    def trigger(self, event: dict[str, Any]) -> dict[str, Any]:
        action = event["action"]
        if action == OUTCOME_ACTION:
            return dict(segment_outcome.summarize(event))
        if action == "start":
            if "resume" in event["input"]:  # continue-as-new: the same state, a new epoch
                resumed: dict[str, Any] = event["input"]["resume"]
                return {**resumed, "segment": dict(resumed["segment"], epoch=self._new_epoch())}
            return {"run_id": "orchestration", "plan_key": "runs/orchestration/plan.json",
                    "segment": {"index": 0, "start_iteration": 0, "iterations": 8,
                                "attempt": 0, "epoch": self._new_epoch(), "resume_epoch": 0},
                    "workers": list(range(self.workers)), "done": False, "cache": None}
        run: dict[str, Any] = event["run"]
        segment = dict(run["segment"], epoch=self._new_epoch())
        if action in ("shorten", "retry"):
            halve = action == "shorten"
            segment.update(attempt=segment["attempt"] + 1,
                           iterations=segment["iterations"] // 2 if halve
                           else segment["iterations"])
            return {**run, "segment": segment}
        segment.update(index=segment["index"] + 1, attempt=0, resume_epoch=run["segment"]["epoch"],
                       start_iteration=segment["start_iteration"] + segment["iterations"])
        return {**run, "segment": segment, "done": segment["index"] >= self.segments}

    def worker(self, event: dict[str, Any]) -> dict[str, Any]:
        segment, worker = event["segment"], int(event["worker"])
        with self.lock:
            claim = (int(segment["epoch"]), worker)
            if claim in self.claims:
                raise InjectedError(WorkerDuplicate.__name__)
            self.claims.add(claim)
        time.sleep(self.sleep_s)
        where = (segment["index"], worker)
        if segment["attempt"] == 0 and where == CRASH_AT:
            raise InjectedError(lambda_errors.EXIT)
        if segment["attempt"] == 0 and where == TIMEOUT_AT:
            raise InjectedError(lambda_errors.TIMEOUT)
        key = self.settings.segment_result_key(event["run_id"], segment["index"],
                                               segment["attempt"], worker)
        body = {"worker": worker, "loss_mean": 1.0, "iterations_done": segment["iterations"],
                "time": {"total_s": self.sleep_s}}
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(body).encode())
        return {"worker": worker}

    def finalize(self, event: dict[str, Any]) -> dict[str, Any]:
        if event["action"] == "failed":
            return {}
        run_id = event["run"]["run_id"]
        found = results.segment_results(self.s3, self.settings, run_id)
        summary = results.summarize(found, self.workers)
        return {"run_id": run_id, "model_key": "-", "summary_key": "-",
                "extra": {"segments": len(summary["segments"]),
                          "results": sum(len(items) for items in found.values())}}


def widened_plan(workers: int, directory: Path) -> Path:
    plan = json.loads((REPO_ROOT / "infra" / "default_plan.json").read_text())
    plan["deployment"]["workers"] = workers
    plan["training"]["max_global_batch"] = 16 * workers
    plan["workload"]["samples"] = max(plan["workload"]["samples"], 64 * workers)
    path = directory / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def history(client: Any, arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = client.get_execution_history(executionArn=arn, maxResults=1000,
                                            **({"nextToken": token} if token else {}))
        events += page["events"]
        token = page.get("nextToken")
        if not token:
            return events


def largest_payload(events: list[dict[str, Any]]) -> int:
    """The longest input, output or task parameters any event of a history carries."""
    sizes = [len(value) for event in events for name, details in event.items()
             if name.endswith("EventDetails") and isinstance(details, dict)
             for key, value in details.items()
             if key in ("input", "output", "parameters") and isinstance(value, str)]
    return max(sizes, default=0)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    print(f"synthesizing W = {args.workers} ...", flush=True)
    template = load_template(synthesize(widened_plan(args.workers, work), work / "cdk.out"),
                             region="us-east-1")
    definition = template.definition
    for choice in definition["States"][workflow.MORE_SEGMENTS]["Choices"]:
        if "NumericGreaterThanEquals" in choice:  # continue as new sooner than 800 segments
            choice["NumericGreaterThanEquals"] = args.segments_per_execution
    with SeaweedS3Server(buckets=(BUCKET,)) as server:
        settings = Settings(stack="bench", channel="s3", deployment="bench",
                            datasets_bucket=BUCKET, results_bucket=BUCKET, exchange_bucket=BUCKET)
        stubs = Stubs(args.workers, args.segments, args.sleep_ms / 1000, server.client(),
                      settings)
        started = time.monotonic()
        with LocalStepFunctions(stubs.route) as sfn:
            arn = sfn.create(template.state_machine_name, definition)
            sfn.start(arn, "first", {})
            executions = sfn.wait(arn, timeout_s=args.timeout)
            histories = [history(sfn.client, e["executionArn"]) for e in executions]
        wall_s = time.monotonic() - started
    return {"stubs": stubs, "executions": executions, "histories": histories, "wall_s": wall_s}


def report(args: argparse.Namespace, outcome: dict[str, Any]) -> dict[str, Any]:
    stubs: Stubs = outcome["stubs"]
    executions, histories = outcome["executions"], outcome["histories"]
    for execution, events in zip(executions, histories, strict=True):
        name = execution["executionArn"].rsplit(":", 1)[-1]
        print(f"{name:>40}: {execution['status']}, {len(events)} history events, "
              f"largest payload {largest_payload(events) / 1024:.1f} KiB")
    for name, values in sorted(stubs.durations.items()):
        print(f"{name:>20}: {len(values)} calls, max {max(values):.3f} s")
    max_payload = max([largest_payload(events) for events in histories]
                      + [stubs.max_lambda_bytes])
    max_events = max(len(events) for events in histories)
    expected = {"trigger.retry", "trigger.shorten", "finalize.succeeded"}
    finalize = stubs.durations.get("finalize.succeeded")
    ok = (executions[-1]["status"] == "SUCCEEDED" and expected <= set(stubs.actions)
          and max_payload < PAYLOAD_LIMIT_KIB * 1024 and max_events < HISTORY_LIMIT)
    return {"workers": args.workers, "segments": args.segments,
            "max_payload_kib": round(max_payload / 1024, 1), "max_history_events": max_events,
            "finalize_s": round(max(finalize), 3) if finalize else None, "ok": ok,
            "executions": len(executions),
            "trigger_max_s": round(max(max(v) for k, v in stubs.durations.items()
                                       if k.startswith("trigger.")), 3),
            "wall_s": round(outcome["wall_s"], 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.orchestration",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--segments", type=int, default=4, help="at least 3 (the faults)")
    parser.add_argument("--sleep-ms", type=float, default=5.0)
    parser.add_argument("--segments-per-execution", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parse_args(parser, argv, workers=41, segments=3, sleep_ms=1.0, timeout=600.0)
    if args.segments < 3:
        parser.error("--segments must be at least 3: the retry and the timeout are in 1 and 2")
    with tempfile.TemporaryDirectory(prefix="fasdl-orchestration-") as scratch:
        summary = report(args, run(args, Path(scratch)))
    print(json.dumps(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
