"""Import your own labelled texts: a TSV or CSV file with a header row.

``python -m fasdl.datasets text SRC.tsv|csv OUT --text-column NAME --label-column NAME``: the
named columns of every row after the header (``.tsv``: tab-separated, no quoting, as GLUE's
files; ``.csv``: comma-separated with the usual double-quote quoting; UTF-8, a leading BOM
allowed; blank lines skipped) give one sentence and its label. Labels that are all integers
must be 0..n-1 (every class present); otherwise they are names, mapped to 0..n-1 in sorted
order and kept in ``train/meta.json``'s ``class_names``. With ``--dev FILE`` (the same
columns) that file is the test split; without, a seeded stratified split of SRC
(fasdl.datasets.split). Sentences are tokenized exactly as ``cola`` does it
(fasdl.datasets.tokens): int32 rows N×2×L, ``vocab.txt`` beside the splits.

A bad file raises :class:`DatasetError` naming the file (and the line).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fasdl.contract.errors import DatasetError
from fasdl.datasets.meta import write_splits
from fasdl.datasets.output import staged_output
from fasdl.datasets.split import (
    DEFAULT_TEST_FRACTION,
    check_labels,
    check_test_fraction,
    stratified_split,
)
from fasdl.datasets.tokens import (
    DEFAULT_MAX_LENGTH,
    DEFAULT_VOCAB_SIZE,
    check_sizes,
    tokenize_splits,
)

DELIMITERS = {".tsv": "\t", ".csv": ","}
MAX_FILE_BYTES = 2**30
INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class Table:
    """One file's texts and labels (as written), with the line each row ends on."""

    path: Path
    texts: list[str]
    labels: list[str]
    lines: list[int]


def read_text(path: Path) -> tuple[str, str]:
    """The file's text and its delimiter."""
    delimiter = DELIMITERS.get(path.suffix.lower())
    if delimiter is None:
        raise DatasetError(f"{path}: expected a .tsv or .csv file")
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise DatasetError(f"{path}: {path.stat().st_size} bytes, more than the "
                               f"{MAX_FILE_BYTES} allowed")
        raw = path.read_bytes()
    except OSError as error:
        raise DatasetError(f"{path}: cannot read ({error.strerror or error})") from error
    try:
        return raw.decode("utf-8-sig"), delimiter
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise DatasetError(f"{path}: line {line}: not UTF-8 (byte {error.start})") from None


def _columns(path: Path, header: list[str] | None, names: tuple[str, str]) -> tuple[int, int]:
    if not header:
        raise DatasetError(f"{path}: line 1: empty file, expected a header row naming the "
                           f"columns")
    for option, name in zip(("--text-column", "--label-column"), names, strict=True):
        if name not in header:
            raise DatasetError(f"{path}: {option} {name!r} is not a column of the header "
                               f"(columns: {', '.join(header)})")
    return header.index(names[0]), header.index(names[1])


def read_table(path: Path, text_column: str, label_column: str) -> Table:
    """The texts and labels of ``path``; errors name the file and the line."""
    text, delimiter = read_text(path)
    table = Table(path, [], [], [])
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter,
                        quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
    try:
        header = next(reader, None)
        text_at, label_at = _columns(path, header, (text_column, label_column))
        for row in reader:
            if row:  # blank lines are skipped
                _add_row(table, row, len(header or ()), (text_at, label_at), reader.line_num)
    except csv.Error as error:
        raise DatasetError(f"{path}: line {reader.line_num}: {error}") from None
    if not table.texts:
        raise DatasetError(f"{path}: no rows after the header")
    return table


def _add_row(table: Table, row: list[str], width: int, at: tuple[int, int], line: int) -> None:
    if len(row) != width:
        raise DatasetError(f"{table.path}: line {line}: {len(row)} columns, the header has "
                           f"{width}")
    text, label = row[at[0]].strip(), row[at[1]].strip()
    if not text:
        raise DatasetError(f"{table.path}: line {line}: empty text")
    if not label:
        raise DatasetError(f"{table.path}: line {line}: empty label")
    table.texts.append(text)
    table.labels.append(label)
    table.lines.append(line)


def encode_labels(train: Table, test: Table | None
                  ) -> tuple[np.ndarray, np.ndarray | None, list[str] | None]:
    """Labels as int64 0..n-1 (train; test or None) and the class names (None for integer
    labels). A test label must be one of the training file's."""
    tables = [train] if test is None else [train, test]
    if all(INTEGER.fullmatch(label) for table in tables for label in table.labels):
        y = np.asarray([int(label) for label in train.labels], dtype=np.int64)
        classes = check_labels(f"{train.path}: --label-column", y)
        names: list[str] | None = None
        codes = {str(label): label for label in range(classes)}
    else:
        names = sorted(set(train.labels))
        if len(names) < 2:
            raise DatasetError(f"{train.path}: labels must name at least 2 classes, got only "
                               f"{names[0]!r}")
        codes = {name: code for code, name in enumerate(names)}
        y = np.asarray([codes[label] for label in train.labels], dtype=np.int64)
    if test is None:
        return y, None, names
    for label, line in zip(test.labels, test.lines, strict=True):
        key = str(int(label)) if names is None else label
        if key not in codes:
            raise DatasetError(f"{test.path}: line {line}: label {label[:40]!r} does not "
                               f"occur in {train.path} (classes 0..{len(codes) - 1})")
    test_y = [codes[str(int(label)) if names is None else label] for label in test.labels]
    return y, np.asarray(test_y, dtype=np.int64), names


def import_text(source: str | Path, out_dir: str | Path, *, text_column: str,
                label_column: str, dev: str | Path | None = None,
                max_length: int = DEFAULT_MAX_LENGTH, vocab: str | Path | None = None,
                vocab_size: int = DEFAULT_VOCAB_SIZE,
                test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0,
                force: bool = False) -> dict[str, int]:
    """Write ``{out_dir}/train`` (with meta.json), ``{out_dir}/test`` and
    ``{out_dir}/vocab.txt``, all or nothing; returns rows per split, ``vocab_size`` and
    ``truncated`` sentences."""
    check_sizes(max_length, vocab_size)
    check_test_fraction(test_fraction)
    if text_column == label_column:
        raise ValueError(f"--text-column and --label-column name the same column "
                         f"{text_column!r}")
    train = read_table(Path(source), text_column, label_column)
    test = None if dev is None else read_table(Path(dev), text_column, label_column)
    y, test_y, names = encode_labels(train, test)
    texts = {"train": train.texts, "test": [] if test is None else test.texts}
    if test_y is None:
        train_rows, test_rows = stratified_split(y, test_fraction, seed)
        texts = {"train": [train.texts[row] for row in train_rows],
                 "test": [train.texts[row] for row in test_rows]}
        y, test_y = y[train_rows], y[test_rows]
    with staged_output(out_dir, force=force) as staging:
        rows, summary = tokenize_splits(staging, texts, vocab=vocab, vocab_size=vocab_size,
                                        max_length=max_length)
        write_splits(staging, "text", (rows["train"], y), (rows["test"], test_y),
                     class_names=names)
    return {**summary, "train": len(y), "test": len(test_y)}
