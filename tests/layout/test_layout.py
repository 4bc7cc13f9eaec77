"""The layout's rules (docs/architecture.md, "Layers"): no import circle among the product's
modules, counting every import (module level, TYPE_CHECKING, inside a function); the runtime's,
the local runner's and the planner's modules live in their rooms, at most 20 to a folder; the
import-linter contracts hold."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# package -> the folder that holds it
ROOTS = {"planner": REPO_ROOT, "infra": REPO_ROOT, "local": REPO_ROOT,
         "fasdl": REPO_ROOT / "functions", "handlers": REPO_ROOT / "functions"}
ENTRY_POINTS = {"__init__.py", "evaluate.py"}  # python -m fasdl.evaluate


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, base in ROOTS.items():
        for path in (base / package).rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, path: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = {_resolve(name, modules) for name in _imported(module, path)}
        graph[module] = {t for t in targets if t and t != module and t != package
                         and not module.startswith(f"{t}.")}
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: groups of modules that each reach all the others (a few hundred
    modules: reachability from each is cheap)."""
    reach = {node: _reachable(graph, node) for node in graph}
    found: list[list[str]] = []
    placed: set[str] = set()
    for node in sorted(graph):
        if node in placed or node not in reach[node]:
            continue
        group = sorted(other for other in reach[node] if node in reach.get(other, set()))
        placed.update(group)
        found.append(group)
    return found


def test_no_import_circle_in_the_product() -> None:
    graph = import_graph()
    assert len(graph) > 100  # the walk found the packages
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# What may stay at a package's top beside its rooms (subpackages): entry points only.
TOP_LEVEL = {REPO_ROOT / "functions" / "fasdl": ENTRY_POINTS,
             REPO_ROOT / "local": {"__init__.py", "__main__.py"},
             REPO_ROOT / "planner": {"__init__.py", "__main__.py"},
             REPO_ROOT / "planner" / "model": {"__init__.py", "confidence.py"}}
MAX_MODULES_PER_FOLDER = 20  # docs/development.md, "Where a new module goes"


def test_packages_keep_their_modules_in_rooms() -> None:
    for package, allowed in TOP_LEVEL.items():
        loose = {path.name for path in package.glob("*.py")}
        assert loose <= allowed, f"{package.relative_to(REPO_ROOT)}: outside a room: " \
            f"{sorted(loose - allowed)}"


def test_no_product_folder_holds_more_than_twenty_modules() -> None:
    crowded = {str(folder.relative_to(REPO_ROOT)): count
               for package, base in ROOTS.items() for folder in (base / package).rglob("*")
               if folder.is_dir() and folder.name != "__pycache__"
               and (count := len(list(folder.glob("*.py")))) > MAX_MODULES_PER_FOLDER}
    assert not crowded, crowded


def test_the_layering_contracts_hold() -> None:
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT / 'functions'}{os.pathsep}{REPO_ROOT}"}
    linter = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(linter), "--no-cache"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
