"""An import-linter contract type for a top-level script (app.py): grimp builds its graph from
packages only, so no built-in contract sees a lone module. This one reads the script's imports
(module level and in-function alike) with ``ast`` and allows only the standard library and the
listed modules; pyproject.toml's ``contract_types`` registers it for ``make lint``."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import cast

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) for every absolute import in ``source``; ``from a import b`` counts as
    ``a.b`` so that an allowance of ``a.b`` matches it."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def is_within(module: str, allowed: str) -> bool:
    return module == allowed or module.startswith(f"{allowed}.")


class ScriptImportsContract(Contract):
    """``script``: a path from the repository root; ``allowed_modules``: what it may import
    besides the standard library (a module and everything under it)."""

    type_name = "script_imports"
    script = fields.StringField()
    allowed_modules = fields.ListField(subfield=fields.StringField())

    def _allowed(self) -> list[str]:
        # the field's value once _populate_fields has run (the class attribute is the field)
        return cast(list[str], self.allowed_modules)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        allowed = self._allowed()
        source = Path(str(self.script)).read_text(encoding="utf-8")
        stray = [(line, module) for line, module in imported_modules(source)
                 if module.split(".")[0] not in sys.stdlib_module_names
                 and module.split(".")[0] != "__future__"
                 and not any(is_within(module, name) for name in allowed)]
        return ContractCheck(kept=not stray, metadata={"stray": stray})

    def render_broken_contract(self, check: ContractCheck) -> None:
        stray: list[tuple[int, str]] = check.metadata["stray"]
        for line, module in stray:
            output.print_error(f"{self.script}:{line} imports {module}, outside the standard "
                               f"library and {', '.join(self._allowed())}")
            output.new_line()
