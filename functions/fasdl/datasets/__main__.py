"""CLI: ``python -m fasdl.datasets digits OUT`` or ``python -m fasdl.datasets cifar10 TAR OUT``.

Both write ``OUT/train`` and ``OUT/test`` together or not at all; a non-empty OUT is refused
unless ``--force``. Exit 0 with one JSON line, or 2 with ``fasdl.datasets: <why>``.
"""

from __future__ import annotations

import argparse
import json
import sys

from fasdl.data import DatasetError
from fasdl.datasets import build_digits, import_cifar10_binary

EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fasdl.datasets", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    digits = commands.add_parser("digits", help="scikit-learn digits (bundled, offline)")
    digits.add_argument("out")
    digits.add_argument("--test-fraction", type=float, default=0.2)
    digits.add_argument("--seed", type=int, default=0)
    cifar = commands.add_parser("cifar10", help="import cifar-10-binary.tar.gz")
    cifar.add_argument("archive")
    cifar.add_argument("out")
    for command in (digits, cifar):
        command.add_argument("--force", action="store_true",
                             help="replace a non-empty output folder whole")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "digits":
            rows = build_digits(args.out, test_fraction=args.test_fraction, seed=args.seed,
                                force=args.force)
        else:
            rows = import_cifar10_binary(args.archive, args.out, force=args.force)
    except (DatasetError, ValueError, OSError) as error:
        print(f"fasdl.datasets: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps({"dataset": args.command, "out": args.out, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
