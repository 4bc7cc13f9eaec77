"""The Lambda emulator alone: environment, context and the error kinds Lambda reports."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from infra import lambda_errors
from local.lambda_.emulator import LambdaEmulator
from local.lambda_.invocation import FunctionSpec
from tests.local.conftest import STUBS

TIMEOUT_S = 15  # counts the sandbox's cold start, which a loaded machine stretches


def _spec(handler: str, **env: str) -> FunctionSpec:
    return FunctionSpec(name="Fn", handler=f"stub_lambdas.{handler}", code_dir=STUBS,
                        timeout_s=TIMEOUT_S, memory_mb=512, environment=env)


def test_only_the_functions_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEAKED_SECRET", "x")
    with LambdaEmulator({"Fn": _spec("environment", FASDL_STACK="S")}, threads=1) as emulator:
        invocation = emulator.invoke("arn:aws:lambda:us-east-1:123456789012:function:Fn", {
            "names": ["FASDL_STACK", "LEAKED_SECRET", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"]})
    assert invocation.function_error is None
    result = json.loads(invocation.payload)
    assert result["env"] == {"FASDL_STACK": "S", "LEAKED_SECRET": None,
                             "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512"}
    assert result["threads"] == "1" and 0 < result["remaining_ms"] <= TIMEOUT_S * 1000
    assert result["arn"].endswith(":function:Fn")
    assert "LEAKED_SECRET" in os.environ


def test_a_relative_log_dir_holds_every_log(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """make run's default report dir is relative (reports/<run id>); a sandbox runs in its
    function's code directory, so the emulator must not hand it a relative log path."""
    monkeypatch.chdir(tmp_path)
    with LambdaEmulator({"Fn": _spec("environment")}, log_dir=Path("reports/run/logs")
                        ) as emulator:
        invocation = emulator.invoke("arn:aws:lambda:us-east-1:123456789012:function:Fn",
                                     {"names": []})
    assert invocation.function_error is None, invocation.payload
    assert [p.name for p in (tmp_path / "reports/run/logs").iterdir()]


@pytest.mark.parametrize(("handler", "error_type"), [
    ("exits", lambda_errors.EXIT), ("unmarshallable", "Runtime.MarshalError"),
    ("missing", "Runtime.HandlerNotFound")])
def test_runtime_errors(handler: str, error_type: str) -> None:
    with LambdaEmulator({"Fn": _spec(handler)}) as emulator:
        invocation = emulator.invoke("Fn", {})
    assert invocation.function_error == "Unhandled"
    assert json.loads(invocation.payload)["errorType"] == error_type == invocation.error_type


def test_import_error_and_unknown_function(tmp_path: Path) -> None:
    spec = FunctionSpec(name="Fn", handler="no_such_module.handler", code_dir=tmp_path,
                        timeout_s=5)
    with LambdaEmulator({"Fn": spec}) as emulator:
        invocation = emulator.invoke("Fn", b"{}")
        assert invocation.error_type == "Runtime.ImportModuleError"
        with pytest.raises(KeyError, match="no emulated Lambda function 'Other'"):
            emulator.invoke("Other", b"{}")


def test_a_crash_before_the_watchdogs_next_sample_still_reports_its_peak() -> None:
    """A handler that exits at once can end before the watchdog samples the started
    interpreter (under load its thread waits for the GIL): the child's peak before the call
    still counts. A 60-s tick leaves the watchdog its first sample only."""
    spec = dataclasses.replace(_spec("exits"), name="exits")
    with LambdaEmulator({"exits": spec}, memory_tick_s=60.0) as emulator:
        invocation = emulator.invoke("exits", {})
    assert invocation.error_type is not None and invocation.peak_rss_mb is not None
    assert 5 < invocation.peak_rss_mb < 512  # Python and the stub module, at least ~10 MB


def test_every_invocation_records_its_memory_peak() -> None:
    """Success, a handler error and a crash alike: M, the group's peak RSS, a REPORT line."""
    with LambdaEmulator({name: dataclasses.replace(_spec(name), name=name)
                         for name in ("environment", "exits", "missing")}) as emulator:
        invocations = [emulator.invoke(name, {"names": []})
                       for name in ("environment", "exits", "missing")]
        logs = [i.log_path.read_text() for i in invocations if i.log_path is not None]
    for invocation, log in zip(invocations, logs, strict=True):
        assert invocation.memory_mb == 512 and invocation.service_error is None
        assert invocation.peak_rss_mb is not None and 5 < invocation.peak_rss_mb < 512
        assert (f"REPORT RequestId: {invocation.request_id} Duration: " in log
                and f"Memory Size: 512 MB Max Memory Used: {invocation.peak_rss_mb:.1f} MB"
                in log and "memory limit on" in log)
        assert not invocation.out_of_memory
