"""The stub workflow: the synthesized state machine in moto's ASL interpreter with every Lambda
call run by the emulator on stub handlers (tests/local/stubs); shared by test_adapter and
test_run_guards."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from infra import workflow
from local.aws.adapter import LocalStepFunctions, emulator_router
from local.aws.template import LocalTemplate
from local.lambda_.emulator import LambdaEmulator
from tests.local.conftest import STUBS

BINDINGS = {"FASDL_DATASETS_BUCKET": "datasets", "FASDL_RESULTS_BUCKET": "results",
            "FASDL_EXCHANGE_BUCKET": "exchange", "FASDL_WORKER_LOG_GROUP": "worker-logs"}
# An invocation's timeout counts its sandbox's cold start, and segment 0's four cold starts
# must all meet in the stub's rendezvous within it: generous, so a loaded machine (the
# parallel pass) cannot time a worker out. The timeout test passes a short one of its own.
WORKER_TIMEOUT_S = 30
HANG_TIMEOUT_S = 10  # the hung worker's: 2-3 s of cold starts in the loaded parallel pass


def stub_emulator(template: LocalTemplate, scratch: Path, *,
                  worker_timeout_s: float = WORKER_TIMEOUT_S, **env: str) -> LambdaEmulator:
    """The template's functions with their handlers swapped for the stubs."""
    specs = template.function_specs(BINDINGS)
    stub_names = {"handlers.trigger": "trigger", "handlers.worker": "worker",
                  "handlers.finalize": "finalize"}
    for name, spec in specs.items():
        stub = stub_names[spec.handler.rpartition(".")[0]]
        timeout = worker_timeout_s if stub == "worker" else 30
        specs[name] = dataclasses.replace(spec, code_dir=STUBS, timeout_s=timeout,
                                          handler=f"stub_lambdas.{stub}")
    specs["Flaky"] = dataclasses.replace(specs[name], name="Flaky", handler="stub_lambdas.flaky")
    specs["Sleepy"] = dataclasses.replace(specs[name], name="Sleepy", timeout_s=WORKER_TIMEOUT_S,
                                          handler="stub_lambdas.sleepy")
    return LambdaEmulator(specs, extra_env={"STUB_DIR": str(scratch), **env})


def stub_calls(scratch: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (scratch / "calls.jsonl").read_text().splitlines()]


def run_stub_workflow(emulator: LambdaEmulator, definition: dict[str, Any],
                      run_input: dict[str, Any], timeout_s: float = 90) -> list[dict[str, Any]]:
    with LocalStepFunctions(emulator_router(emulator.invoke)) as sfn:
        arn = sfn.create(workflow.state_machine_name("FasdlStack"), definition)
        sfn.start(arn, "first", run_input)
        return sfn.wait(arn, timeout_s=timeout_s)
