"""Where the user's own code (a model builder, a loss) lives: locally, as it lies; on AWS, in a
layer the synth builds (infra/compute.py), whose ``python/`` folder Lambda puts on ``sys.path``.

A file in a folder without ``__init__.py`` is one module (its stem). A file inside a package
ships with the whole package (the topmost folder of the ``__init__.py`` chain), so its relative
and absolute imports inside the package work. Both sides compute the module name with
:func:`code_location`; the synth hands the functions ``{reference: module}`` in
``FASDL_USER_MODULES`` (fasdl.contract.settings), since the file's own path does not exist in
Lambda.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Top-level names a user module must not take: they would shadow the runtime's own.
RESERVED_MODULES = frozenset({"fasdl", "handlers", "torch", "numpy", "boto3", "botocore",
                              "redis", "valkey", "aws_lambda_powertools", "google_crc32c",
                              "zstandard", "safetensors", "planner", "infra", "local"})


class UserCodeError(ValueError):
    """A reference to the user's code that cannot be loaded; the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class CodeLocation:
    root: Path    # the folder to put on sys.path
    module: str   # the dotted module name under it
    shipped: Path  # what the synth copies into the layer: the file or its top package

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


def code_location(file: Path, field: str) -> CodeLocation:
    """The module of ``file`` (which must exist) and what ships with it."""
    if not file.is_file():
        raise UserCodeError(field, f"file {file} not found")
    file = file.resolve()
    folder = file.parent
    parts = [file.stem]
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    module = ".".join(parts)
    shipped = file if len(parts) == 1 else folder / parts[0]
    if parts[0] in RESERVED_MODULES or not all(part.isidentifier() for part in parts):
        raise UserCodeError(field, f"{file} would be imported as {module!r}: rename it (module "
                                   f"names must be identifiers and not one of "
                                   f"{', '.join(sorted(RESERVED_MODULES))})")
    return CodeLocation(root=folder, module=module, shipped=shipped)
