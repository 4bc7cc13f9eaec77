"""How a workload names a model (or a loss), :class:`ModelRef`, and where the user's own code
lives: locally, as it lies; on AWS, in a layer the synth builds (infra/compute.py), whose
``python/`` folder Lambda puts on ``sys.path``.

A reference is a registry name (``cnn``, ``resnet18``; fasdl.training.networks knows them) or the
user's own code, ``path/to/file.py:function``. :meth:`ModelRef.parse` is the one place the text
is split; the plan, the synth, the profiler, the exported model and the runtime's builders all
take its value.

A file in a folder without ``__init__.py`` is one module (its stem). A file inside a package
ships with the whole package (the topmost folder of the ``__init__.py`` chain), so its relative
and absolute imports inside the package work. Both sides compute the module name with
:func:`code_location`; the synth hands the functions ``{reference: module}`` in
``FASDL_USER_MODULES`` (fasdl.contract.settings), since the file's own path does not exist in
Lambda.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fasdl.contract.fields import IDENTIFIER, Fail, PlanError, require_choice, show

# Top-level names a user module must not take: they would shadow the runtime's own.
RESERVED_MODULES = frozenset({"fasdl", "handlers", "torch", "numpy", "boto3", "botocore",
                              "redis", "valkey", "aws_lambda_powertools", "google_crc32c",
                              "zstandard", "safetensors", "planner", "infra", "local"})


# path/to/file.py:function; a path of letters, digits, '_', '.', '-' and '/' (absolute or
# relative to where the planner, the synth and the local runner are started)
CODE_REFERENCE = re.compile(r"^(?P<path>/?[A-Za-z0-9_.\-/]{1,255}\.py):"
                            r"(?P<function>[A-Za-z_][A-Za-z0-9_]{0,63})\Z")
REGISTRY_OR_CODE = ("a model registry name (1-64 letters, digits, '_', '.', '-') or "
                    "path/to/file.py:function")


@dataclass(frozen=True)
class ModelRef:
    """A parsed model (or loss) reference: ``name`` as written; ``file`` and ``function`` when
    it is the user's own code, else None (a registry name). ``str()`` is the text."""

    name: str
    file: str | None = None
    function: str | None = None

    @classmethod
    def parse(cls, value: object, field: str, *, names: tuple[str, ...] | None = None,
              fail: Fail = PlanError) -> ModelRef:
        """The reference in ``value``, or an error naming ``field`` (``fail``'s: a PlanError,
        a profile's ProfileError): a ``file.py:function`` whose path has no '..' part, else a
        registry name: one of ``names`` when given (the losses), else an identifier (the model
        registry is the runtime's, checked there)."""
        match = CODE_REFERENCE.fullmatch(value) if isinstance(value, str) else None
        if match is not None:
            if ".." in match["path"].split("/"):
                raise fail(field, f"the file's path must not contain '..', got {show(value)}")
            return cls(match.string, match["path"], match["function"])
        if names is not None:
            return cls(require_choice(field, value, names, fail))
        if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
            raise fail(field, f"must be {REGISTRY_OR_CODE}, got {show(value)}")
        return cls(value)

    @property
    def code(self) -> tuple[str, str] | None:
        """(file, function) of the user's own code; None for a registry name."""
        if self.file is None or self.function is None:
            return None
        return self.file, self.function

    def __str__(self) -> str:
        return self.name


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
