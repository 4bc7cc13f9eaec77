"""CLI: ``python -m fasdl.datasets digits OUT``, ``... cifar10 TAR OUT``, ``... cola GLUE_COLA_DIR
OUT [--vocab vocab.txt] [--max-length 64] [--vocab-size 1024]`` or ``... textset OUT_DIR
[--seed S] [--sentences N]``.

The importers write ``OUT/train`` and ``OUT/test`` (cola: and ``OUT/vocab.txt``) together or
not at all; a non-empty OUT is refused unless ``--force``. ``textset`` writes a generated
``train.tsv`` and ``dev.tsv`` in CoLA's format (fasdl.datasets.textset says what it is and is
not) for ``cola`` to import. Exit 0 with one JSON line, or 2 with ``fasdl.datasets: <why>``.
"""

from __future__ import annotations

import argparse
import json
import sys

from fasdl.datasets import build_digits, import_cifar10_binary
from fasdl.datasets.cola import DEFAULT_MAX_LENGTH, DEFAULT_VOCAB_SIZE, import_cola
from fasdl.datasets.textset import write_textset
from fasdl.training.data import DatasetError

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
    cola = commands.add_parser("cola", help="import GLUE CoLA train.tsv + dev.tsv (WordPiece)")
    cola.add_argument("cola_dir", help="folder with train.tsv and dev.tsv")
    cola.add_argument("out")
    cola.add_argument("--vocab", help="a WordPiece vocab.txt (default: train one)")
    cola.add_argument("--max-length", type=int, default=DEFAULT_MAX_LENGTH,
                      help="tokens per sentence, [CLS] and [SEP] included")
    cola.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE,
                      help="at most this many tokens in a trained vocabulary")
    textset = commands.add_parser("textset", help="generate a small CoLA-format text set")
    textset.add_argument("out")
    textset.add_argument("--seed", type=int, default=0)
    textset.add_argument("--sentences", type=int, default=2000,
                         help="training sentences (dev: a quarter as many)")
    for command in (digits, cifar, cola, textset):
        command.add_argument("--force", action="store_true",
                             help="replace a non-empty output folder whole")
    return parser


def _run(args: argparse.Namespace) -> dict[str, object]:
    """What the command wrote, for its JSON line."""
    if args.command == "cola":
        summary = import_cola(args.cola_dir, args.out, vocab=args.vocab,
                              max_length=args.max_length, vocab_size=args.vocab_size,
                              force=args.force)
        return {"rows": {split: summary[split] for split in ("train", "test")},
                "vocab_size": summary["vocab_size"], "max_length": args.max_length,
                "truncated": summary["truncated"]}
    if args.command == "textset":
        return {"rows": write_textset(args.out, seed=args.seed, sentences=args.sentences,
                                      force=args.force)}
    if args.command == "digits":
        return {"rows": build_digits(args.out, test_fraction=args.test_fraction,
                                     seed=args.seed, force=args.force)}
    return {"rows": import_cifar10_binary(args.archive, args.out, force=args.force)}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        written = _run(args)
    except (DatasetError, ValueError, OSError) as error:
        print(f"fasdl.datasets: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps({"dataset": args.command, "out": args.out, **written}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
