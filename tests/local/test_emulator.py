"""The Lambda emulator alone: environment, context and the error kinds Lambda reports."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from local.emulator import EXIT_ERROR, FunctionSpec, LambdaEmulator
from tests.local.conftest import STUBS


def _spec(handler: str, **env: str) -> FunctionSpec:
    return FunctionSpec(name="Fn", handler=f"stub_lambdas.{handler}", code_dir=STUBS,
                        timeout_s=5, memory_mb=512, environment=env)


def test_only_the_functions_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEAKED_SECRET", "x")
    with LambdaEmulator({"Fn": _spec("environment", FASDL_STACK="S")}, threads=1) as emulator:
        invocation = emulator.invoke("arn:aws:lambda:us-east-1:123456789012:function:Fn", {
            "names": ["FASDL_STACK", "LEAKED_SECRET", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"]})
    assert invocation.function_error is None
    result = json.loads(invocation.payload)
    assert result["env"] == {"FASDL_STACK": "S", "LEAKED_SECRET": None,
                             "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512"}
    assert result["threads"] == "1" and 0 < result["remaining_ms"] <= 5000
    assert result["arn"].endswith(":function:Fn")
    assert "LEAKED_SECRET" in os.environ


@pytest.mark.parametrize(("handler", "error_type"), [
    ("exits", EXIT_ERROR), ("unmarshallable", "Runtime.MarshalError"),
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
