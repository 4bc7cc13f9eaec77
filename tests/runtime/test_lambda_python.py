"""The function code under the Lambda runtime's own CPython (3.12), with the layer's deps.

The project develops and tests on 3.11; Lambda runs infra.lambda_runtime.PYTHON_RUNTIME. These
tests install the handlers' runtime dependencies exactly as the layer build does (cp312 wheels
for manylinux, from the package registry) into a folder, then run the torch-free parts in an
isolated 3.12 process that sees only the stdlib, that folder and functions/: every handler
imports, the trigger plans a retry as it does on 3.11, shard frames round-trip with numpy and
the C CRC, the torch loader unpacks an archive, and a worker without a torch layer fails with
the clear message instead of an ImportError.

CPython 3.12 comes from PATH or pyenv. Without it these tests skip on a developer machine and
fail in CI (``CI=true``), where the interpreter is part of the platform.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from fasdl.contract.keys import fence_key
from fasdl.run.run_state import first_state, next_state, retry_state
from infra.lambda_runtime import PYTHON_RUNTIME, lambda_target
from tests.runtime.kreduce_helpers import plan_with

ROOT = Path(__file__).resolve().parents[2]
LAYER_TOOLS = ROOT / "layers" / "torch"
FUNCTIONS = ROOT / "functions"
TARGET = lambda_target("x86_64")  # this machine's arch; the ABI and OS are the runtime's


def _layer_module(name: str) -> ModuleType:
    """A module of the layer build (a script folder, not a package)."""
    if str(LAYER_TOOLS) not in sys.path:
        sys.path.insert(0, str(LAYER_TOOLS))
    spec = importlib.util.spec_from_file_location(name, LAYER_TOOLS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runtime_python() -> str:
    found: str | None = _layer_module("target_python").find_target_python(TARGET, None)
    if found is None:
        message = (f"no CPython {TARGET.python_version} found (PATH or pyenv): the function code "
                   f"cannot be checked under {PYTHON_RUNTIME}")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def layer_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The handlers' runtime deps for cp312 manylinux, installed as the layer build does."""
    folder = tmp_path_factory.mktemp("layer-python")
    _layer_module("runtime_deps").install_runtime_deps(folder, TARGET)
    loader_deps = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps",
         "--only-binary=:all:", "--implementation", "cp", "--python-version",
         TARGET.python_version, "--platform", f"manylinux2014_{TARGET.machine}",
         "--target", str(folder), "zstandard==0.25.0"],
        capture_output=True, text=True, check=False)
    assert loader_deps.returncode == 0, loader_deps.stderr
    yield folder


def run_under_runtime(python: str, layer: Path, code: str, *args: str,
                      env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``code`` in an isolated interpreter (-I -S: no site-packages, no PYTHON* env) with
    the layer's python/ folder and functions/ on sys.path, as Lambda arranges them."""
    prologue = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
                "del sys.argv[1:3]\n")
    proc = subprocess.run([python, "-I", "-S", "-c", prologue + code, str(layer),
                           str(FUNCTIONS), *args], capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


IMPORTS = r"""
import importlib, json, sys
names = ["handlers.trigger", "handlers.finalize", "handlers.worker", "handlers.profiler"]
for name in names:
    importlib.import_module(name)
import numpy, google_crc32c, redis, boto3, aws_lambda_powertools
extensions = sorted({m.__file__.rsplit("/", 1)[-1] for m in list(sys.modules.values())
                     if (getattr(m, "__file__", None) or "").endswith(".so")})
print(json.dumps({"version": list(sys.version_info[:2]), "torch": "torch" in sys.modules,
                  "crc": google_crc32c.implementation, "numpy": numpy.__version__,
                  "boto3": boto3.__version__, "extensions": extensions,
                  "outside": sorted({m.__name__.split(".")[0] for m in sys.modules.values()
                                     if "-packages" in (getattr(m, "__file__", None) or "")})}))
"""


def test_handlers_import_on_the_runtime_python(runtime_python: str, layer_python: Path) -> None:
    result = run_under_runtime(runtime_python, layer_python, IMPORTS)
    assert tuple(result["version"]) == TARGET.python
    assert result["torch"] is False  # no torch layer here, and importing must not need it
    assert result["crc"] == "c", "the pure-Python CRC fallback would make frames slow"
    assert result["outside"] == []  # nothing from this machine's site-packages
    assert result["extensions"], "expected numpy/crc32c extension modules"
    tag = f"cpython-{TARGET.python[0]}{TARGET.python[1]}-{TARGET.machine}-linux-gnu.so"
    assert all(name.endswith((tag, ".abi3.so")) for name in result["extensions"]), \
        result["extensions"]


CONTEXT = r"""
class Context:  # what Powertools' inject_lambda_context reads; Lambda always passes one
    function_name, memory_limit_in_mb, aws_request_id = "fasdl-test", 1024, "request-1"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:fasdl-test"
    def get_remaining_time_in_millis(self): return 600_000
"""

TRIGGER = CONTEXT + r"""
import json, sys
from handlers import trigger
event = json.loads(sys.argv[1])
print(json.dumps(trigger.handler(event, Context())))
"""


def test_trigger_plans_a_retry_as_on_the_development_python(runtime_python: str,
                                                             layer_python: Path) -> None:
    plan = plan_with(total_epochs=3, segment_iterations=8)
    run = next_state(first_state(plan, "r", "runs/r/plan.json", epoch=1), plan, epoch=2)
    error = {"Error": "Runtime.ExitError", "Cause": "exit status 137"}
    server = ThreadedMotoServer(port=0, verbose=False)  # the fence lives in S3
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {"FASDL_STACK": "Test", "FASDL_CHANNEL": "s3", "FASDL_DEPLOYMENT": "test",
               "FASDL_DATASETS_BUCKET": "d", "FASDL_RESULTS_BUCKET": "rrr",
               "FASDL_EXCHANGE_BUCKET": "eee", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "x",
               "AWS_SECRET_ACCESS_KEY": "y", "POWERTOOLS_METRICS_NAMESPACE": "Test"}
        client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                              region_name="us-east-1", aws_access_key_id="x",
                              aws_secret_access_key="y")
        for bucket in ("rrr", "eee"):
            client.create_bucket(Bucket=bucket)
        # the fence at the run state's epoch: a retry supersedes only that (issue 41)
        client.put_object(Bucket="rrr", Key=f"runs/{fence_key('r')}",
                          Body=json.dumps({"format": 1, "epoch": 2, "token": "next:1"}))
        event = json.dumps({"action": "retry", "run": run, "error": error})
        planned = run_under_runtime(runtime_python, layer_python, TRIGGER, event, env=env)
    finally:
        server.stop()
    assert planned == {**retry_state(run, error, epoch=3), "cache": None}


FRAMES = r"""
import json, numpy as np
from fasdl.exchange import wire
values = np.arange(1000, dtype=np.float32) / 7
frame = wire.encode_shard(values, run="r", iteration=3, worker=1, shard=0)
back = wire.decode_shard(frame, run="r", iteration=3, shard=0, worker=1)
print(json.dumps({"equal": bool(np.array_equal(back, values)), "bytes": len(frame)}))
"""


def test_shard_frames_round_trip_on_the_runtime_python(runtime_python: str,
                                                       layer_python: Path) -> None:
    result = run_under_runtime(runtime_python, layer_python, FRAMES)
    assert result["equal"] and result["bytes"] > 4000


WORKER_WITHOUT_TORCH = CONTEXT + r"""
import json
from handlers import worker
try:
    worker.handler({"action": "train"}, Context())
except Exception as error:
    print(json.dumps({"type": type(error).__name__, "message": str(error)}))
"""


def test_worker_without_the_layer_fails_with_the_reason(runtime_python: str,
                                                        layer_python: Path) -> None:
    result = run_under_runtime(runtime_python, layer_python, WORKER_WITHOUT_TORCH)
    assert result["type"] == "TorchUnavailable"
    assert "torch layer could not be loaded" in result["message"]
