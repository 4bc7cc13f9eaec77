"""The import contracts close the edges (issue 40): plant one wrong-way import at a time in a
copy of the sources and `lint-imports` must fail, naming the contract that broke. A contract
that silently stopped matching (a renamed module, a layer left out) would pass the real tree
and fail here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# What lint-imports reads: the config, the script contract's module and the root packages.
SOURCES = ("pyproject.toml", "app.py", "tests/__init__.py", "tests/layout/__init__.py",
           "tests/layout/script_contract.py", "functions/fasdl", "functions/handlers",
           "planner", "infra", "local")
# (file in the copy, the planted line, the contract that must break)
PLANTS = [
    ("app.py", "import fasdl.run.run_state",
     "The CDK app imports only the stack and the runtime's contract"),
    ("planner/commands/calibrate.py", "import planner.commands.cli",
     "The planner's rooms import only downwards"),
    ("planner/model/terms/cost_model.py", "import fasdl.exchange.kreduce",
     "The planner takes from the runtime its contract and the named modules only"),
    ("functions/fasdl/contract/keys.py", "import torch",
     "The runtime's contract imports only the standard library"),
    ("local/servers/managed.py", "import local.run.runner",
     "The local runner's rooms import only downwards (servers never import the run)"),
]


def _python_only(folder: str, names: list[str]) -> set[str]:
    # sources only: data files and caches are large and no import reads them
    return {name for name in names if name == "__pycache__"
            or (not name.endswith(".py") and not (Path(folder) / name).is_dir())}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("pristine")
    for source in SOURCES:
        origin, target = REPO_ROOT / source, copy / source
        if origin.is_dir():
            shutil.copytree(origin, target, ignore=_python_only)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)
    return copy


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{root / 'functions'}{os.pathsep}{root}"}
    linter = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(linter), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_copy_keeps_every_contract(pristine: Path) -> None:
    done = lint_imports(pristine)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


@pytest.mark.parametrize(("path", "planted", "contract"), PLANTS,
                         ids=[plant[0] for plant in PLANTS])
def test_a_planted_import_breaks_its_contract(pristine: Path, tmp_path: Path, path: str,
                                              planted: str, contract: str) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(pristine, copy)
    target = copy / path
    target.write_text(target.read_text(encoding="utf-8") + f"\n{planted}  # planted\n",
                      encoding="utf-8")
    done = lint_imports(copy)
    assert done.returncode != 0, done.stdout[-3000:]
    assert f"{contract} BROKEN" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
