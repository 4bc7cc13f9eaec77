"""CLI: ``python -m fasdl.datasets digits OUT``, ``... cifar10 TAR OUT``, ``... cola GLUE_COLA_DIR
OUT [--vocab vocab.txt] [--max-length 64] [--vocab-size 1024]``, ``... textset OUT_DIR
[--seed S] [--sentences N]``; your own data: ``... images SRC OUT --size H W``, ``... arrays
X.npy Y.npy OUT`` or ``... arrays DATA.npz OUT``, ``... table SRC.csv|tsv OUT --label-column
NAME`` (numeric features), ``... text SRC.tsv|csv OUT --text-column NAME --label-column NAME
[--dev FILE] [--max-length L] [--vocab vocab.txt]`` (digits, images, arrays, table and text:
``[--test-fraction 0.2] [--seed 0]`` for the stratified split).

The importers write ``OUT/train`` (with ``meta.json``: fasdl.datasets.meta) and ``OUT/test``
(cola, text: and ``OUT/vocab.txt``) together or not at all; a non-empty OUT is refused unless
``--force``. ``textset`` writes a generated ``train.tsv`` and ``dev.tsv`` in CoLA's format
(fasdl.datasets.textset says what it is and is not) for ``cola`` to import. Exit 0 with one
JSON line (an importer's holds its meta.json's fields), or 2 with ``fasdl.datasets: <why>``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from fasdl.contract.errors import DatasetError
from fasdl.datasets import build_digits, import_cifar10_binary
from fasdl.datasets.arrays import import_arrays
from fasdl.datasets.cola import import_cola
from fasdl.datasets.images import import_images
from fasdl.datasets.meta import read_meta
from fasdl.datasets.split import DEFAULT_TEST_FRACTION
from fasdl.datasets.table import import_table
from fasdl.datasets.text import import_text
from fasdl.datasets.textset import write_textset
from fasdl.datasets.tokens import DEFAULT_MAX_LENGTH, DEFAULT_VOCAB_SIZE

EXIT_BAD_INPUT = 2
Commands = Any  # argparse's private _SubParsersAction


def _split_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--test-fraction", type=float, default=DEFAULT_TEST_FRACTION,
                         help="share of each class in the test split, in (0, 1)")
    command.add_argument("--seed", type=int, default=0, help="the split's seed")


def _token_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--vocab", help="a WordPiece vocab.txt (default: train one)")
    command.add_argument("--max-length", type=int, default=DEFAULT_MAX_LENGTH,
                         help="tokens per sentence, [CLS] and [SEP] included")
    command.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE,
                         help="at most this many tokens in a trained vocabulary")


def _shipped_commands(commands: Commands) -> list[argparse.ArgumentParser]:
    digits = commands.add_parser("digits", help="scikit-learn digits (bundled, offline)")
    digits.add_argument("out")
    _split_options(digits)
    cifar = commands.add_parser("cifar10", help="import cifar-10-binary.tar.gz")
    cifar.add_argument("archive")
    cifar.add_argument("out")
    cola = commands.add_parser("cola", help="import GLUE CoLA train.tsv + dev.tsv (WordPiece)")
    cola.add_argument("cola_dir", help="folder with train.tsv and dev.tsv")
    cola.add_argument("out")
    _token_options(cola)
    textset = commands.add_parser("textset", help="generate a small CoLA-format text set")
    textset.add_argument("out")
    textset.add_argument("--seed", type=int, default=0)
    textset.add_argument("--sentences", type=int, default=2000,
                         help="training sentences (dev: a quarter as many)")
    return [digits, cifar, cola, textset]


def _own_data_commands(commands: Commands) -> list[argparse.ArgumentParser]:
    images = commands.add_parser("images", help="import one folder per class of JPEG/PNG "
                                                "images")
    images.add_argument("source", help="folder with one subfolder of images per class")
    images.add_argument("out")
    images.add_argument("--size", type=int, nargs=2, required=True, metavar=("H", "W"),
                        help="every image is resized to H x W pixels")
    arrays = commands.add_parser("arrays", help="import x.npy + y.npy, or an .npz with x and y")
    arrays.add_argument("paths", nargs="+", metavar="PATH",
                        help="X.npy Y.npy OUT, or DATA.npz OUT")
    table = commands.add_parser("table", help="import a CSV/TSV file of numeric features and "
                                              "a label column")
    table.add_argument("source", help="a .csv or .tsv file with a header row")
    table.add_argument("out")
    table.add_argument("--label-column", required=True, help="the header's name of the labels")
    text = commands.add_parser("text", help="import a TSV/CSV file of labelled texts")
    text.add_argument("source", help="a .tsv or .csv file with a header row")
    text.add_argument("out")
    text.add_argument("--text-column", required=True, help="the header's name of the texts")
    text.add_argument("--label-column", required=True, help="the header's name of the labels")
    text.add_argument("--dev", help="a file with the same columns: the test split "
                                    "(default: split SOURCE)")
    _token_options(text)
    for command in (images, arrays, table, text):
        _split_options(command)
    return [images, arrays, table, text]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fasdl.datasets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for command in _shipped_commands(commands) + _own_data_commands(commands):
        command.add_argument("--force", action="store_true",
                             help="replace a non-empty output folder whole")
    return parser


def _tokens(args: argparse.Namespace, summary: dict[str, int]) -> dict[str, object]:
    return {"rows": {split: summary[split] for split in ("train", "test")},
            "vocab_size": summary["vocab_size"], "max_length": args.max_length,
            "truncated": summary["truncated"]}


def _arrays(args: argparse.Namespace) -> dict[str, object]:
    if len(args.paths) not in (2, 3):
        raise ValueError(f"arrays: expected X.npy Y.npy OUT or DATA.npz OUT, got "
                         f"{len(args.paths)} paths")
    args.out = args.paths[-1]
    return {"rows": import_arrays(args.paths[:-1], args.out, test_fraction=args.test_fraction,
                                  seed=args.seed, force=args.force)}


RUNS: dict[str, Callable[[argparse.Namespace], dict[str, object]]] = {
    "digits": lambda a: {"rows": build_digits(a.out, test_fraction=a.test_fraction,
                                              seed=a.seed, force=a.force)},
    "cifar10": lambda a: {"rows": import_cifar10_binary(a.archive, a.out, force=a.force)},
    "cola": lambda a: _tokens(a, import_cola(a.cola_dir, a.out, vocab=a.vocab,
                                             max_length=a.max_length,
                                             vocab_size=a.vocab_size, force=a.force)),
    "textset": lambda a: {"rows": write_textset(a.out, seed=a.seed, sentences=a.sentences,
                                                force=a.force)},
    "images": lambda a: {"rows": import_images(a.source, a.out, size=tuple(a.size),
                                               test_fraction=a.test_fraction, seed=a.seed,
                                               force=a.force)},
    "arrays": _arrays,
    "table": lambda a: {"rows": import_table(a.source, a.out, label_column=a.label_column,
                                             test_fraction=a.test_fraction, seed=a.seed,
                                             force=a.force)},
    "text": lambda a: _tokens(a, import_text(
        a.source, a.out, text_column=a.text_column, label_column=a.label_column, dev=a.dev,
        max_length=a.max_length, vocab=a.vocab, vocab_size=a.vocab_size,
        test_fraction=a.test_fraction, seed=a.seed, force=a.force)),
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        written = RUNS[args.command](args)
        if args.command != "textset":  # an importer: its meta.json's fields too
            written = {**written, **read_meta(args.out)}
    except (DatasetError, ValueError, OSError) as error:
        print(f"fasdl.datasets: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps({"dataset": args.command, "out": args.out, **written}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
