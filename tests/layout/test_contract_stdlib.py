"""fasdl/contract/ runs everywhere (the trigger without numpy, infra at synth, the planner):
its modules import the standard library and each other only. import-linter's contract names
the heavy packages; this walks every import, so a package nobody thought of fails too."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CONTRACT = Path(__file__).resolve().parents[2] / "functions" / "fasdl" / "contract"


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import that runs: annotations under TYPE_CHECKING
    never do."""
    found: list[tuple[int, str]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            found += [item for child in node.orelse for item in _runtime_imports(child)]
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
        found += _runtime_imports(node)
    return found


def _allowed(module: str) -> bool:
    package = module.split(".")[0]
    return (package in sys.stdlib_module_names or package == "__future__"
            or module == "fasdl.contract" or module.startswith("fasdl.contract."))


def test_the_runtime_contract_imports_only_the_standard_library() -> None:
    stray = [f"{path.name}:{line} imports {module}"
             for path in sorted(CONTRACT.rglob("*.py"))
             for line, module in _runtime_imports(ast.parse(path.read_text(), str(path)))
             if not _allowed(module)]
    assert not stray, stray


def test_the_walk_sees_an_import_inside_a_function() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import numpy\n" \
             "def f():\n    import torch\n"
    assert _runtime_imports(ast.parse(source)) == [(1, "typing"), (5, "torch")]
    assert not _allowed("fasdl.run.run_state") and _allowed("fasdl.contract.plan")
