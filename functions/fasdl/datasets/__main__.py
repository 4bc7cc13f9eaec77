"""CLI: ``python -m fasdl.datasets digits OUT`` or ``python -m fasdl.datasets cifar10 TAR OUT``."""

from __future__ import annotations

import argparse
import json

from fasdl.datasets import build_digits, import_cifar10_binary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fasdl.datasets", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    digits = commands.add_parser("digits", help="scikit-learn digits (bundled, offline)")
    digits.add_argument("out")
    digits.add_argument("--test-fraction", type=float, default=0.2)
    digits.add_argument("--seed", type=int, default=0)
    cifar = commands.add_parser("cifar10", help="import cifar-10-binary.tar.gz")
    cifar.add_argument("archive")
    cifar.add_argument("out")
    args = parser.parse_args(argv)
    if args.command == "digits":
        rows = build_digits(args.out, test_fraction=args.test_fraction, seed=args.seed)
    else:
        rows = import_cifar10_binary(args.archive, args.out)
    print(json.dumps({"dataset": args.command, "out": args.out, "rows": rows}))


if __name__ == "__main__":
    main()
