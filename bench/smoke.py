"""The benchmarks' smoke size: a bench's whole path (the same functions, the same JSON last
line) at its smallest size, in seconds where it can be, so that the suite runs every bench and
none can rot unnoticed (tests/bench/test_bench_smoke.py).

Asked for with ``FASDL_BENCH_SMOKE=1`` in the environment or ``--smoke`` on the command line.
Each bench names its smallest size as defaults (:func:`parse_args`): flags given explicitly
still win. At the smoke size a bench never rewrites docs/results.md or docs/results/: what it
would write there goes to a temporary folder (:func:`smoke_folder`), and it says so. Its
numbers measure nothing worth keeping; only that the path runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.readme import RESULTS_DOC

SMOKE_ENV = "FASDL_BENCH_SMOKE"
_ON, _OFF = ("1", "true", "yes"), ("", "0", "false", "no")


def smoke_from_env(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``$FASDL_BENCH_SMOKE`` asks for the smoke size (1/0; a typo is an error, not a
    full-size run of minutes or hours)."""
    value = environ.get(SMOKE_ENV, "").strip().lower()
    if value not in _ON + _OFF:
        raise SystemExit(f"error: {SMOKE_ENV}={environ[SMOKE_ENV]!r}: use 1 (smoke size) or 0")
    return value in _ON


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None,
               **smallest: Any) -> argparse.Namespace:
    """``parser``'s arguments plus ``--smoke`` (default from the environment); at the smoke
    size ``smallest`` replaces the defaults, so explicit flags still win."""
    parser.add_argument("--smoke", action="store_true", default=smoke_from_env(),
                        help=f"the smoke size: the whole path at its smallest size, the docs "
                             f"left as they are (also {SMOKE_ENV}=1)")
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    if args.smoke:
        if smallest:
            parser.set_defaults(**smallest)
            args = parser.parse_args(arguments)
        print(f"smoke size ({SMOKE_ENV}=1 or --smoke): the whole path at its smallest; "
              "docs/results.md and docs/results/ stay as they are", flush=True)
    return args


def smoke_folder(bench: str) -> Path:
    """A fresh temporary folder for what ``bench`` writes under docs/ at full size; says so."""
    folder = Path(tempfile.mkdtemp(prefix=f"fasdl-smoke-{bench}-"))
    print(f"smoke size: {bench} writes what it would write under docs/ to {folder}",
          flush=True)
    return folder


def results_targets(bench: str, smoke: bool) -> tuple[Path, Path]:
    """(folder of plots and JSON, results document) that ``bench`` writes: docs/results/ and
    docs/results.md, or at the smoke size a temporary copy of the document and a folder beside
    it (the same writing code runs, the docs stay as they are)."""
    if not smoke:
        return RESULTS_DOC.parent / "results", RESULTS_DOC
    folder = smoke_folder(bench)
    doc = folder / RESULTS_DOC.name
    shutil.copyfile(RESULTS_DOC, doc)
    return folder / "results", doc
