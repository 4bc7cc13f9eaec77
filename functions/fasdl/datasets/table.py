"""Import a numeric table of your own: a CSV or TSV file with a header row.

``python -m fasdl.datasets table SRC.csv|tsv OUT --label-column NAME``: every other column of
the header is a feature and every cell of it a number (read as float32; an empty, NaN or
infinite cell is refused, naming the line and the column). The file is read as the ``text``
importer reads one (fasdl.datasets.text: ``.tsv`` tab-separated, ``.csv`` with double-quote
quoting, UTF-8, blank lines skipped), and labels are taken the same way: all integers must be
0..n-1, otherwise they are names mapped to 0..n-1 in sorted order and kept as
``class_names``. The rows become N×F float32 feature vectors with a seeded stratified split
(fasdl.datasets.split); ``train/meta.json`` has their per-feature mean and std
(fasdl.datasets.meta), what ``workload new`` copies into ``workload.normalization``.

A bad file raises :class:`DatasetError` naming the file (and the line).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from fasdl.contract.errors import DatasetError
from fasdl.datasets.arrays import check_rows
from fasdl.datasets.meta import write_splits
from fasdl.datasets.output import staged_output
from fasdl.datasets.split import DEFAULT_TEST_FRACTION, check_test_fraction, stratified_split
from fasdl.datasets.text import Table, encode_labels, read_text


def _number(path: Path, line: int, column: str, cell: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise DatasetError(f"{path}: line {line}: column {column!r}: {cell.strip()!r} is not "
                           f"a finite number")
    return value


def read_numeric_table(path: Path, label_column: str) -> tuple[np.ndarray, Table]:
    """The feature rows (float32 N×F) and the labels as written (a text Table without
    texts); errors name the line."""
    text, delimiter = read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter,
                        quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
    rows: list[list[float]] = []
    labels = Table(path, [], [], [])
    try:
        header = [name.strip() for name in next(reader, None) or []]
        if label_column not in header:
            raise DatasetError(f"{path}: --label-column {label_column!r} is not a column of "
                               f"the header (columns: {', '.join(header) or 'none'})")
        at = header.index(label_column)
        features = [i for i in range(len(header)) if i != at]
        if not features:
            raise DatasetError(f"{path}: the header has no column besides the label")
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise DatasetError(f"{path}: line {reader.line_num}: {len(row)} columns, the "
                                   f"header has {len(header)}")
            rows.append([_number(path, reader.line_num, header[i], row[i]) for i in features])
            if not row[at].strip():
                raise DatasetError(f"{path}: line {reader.line_num}: empty label")
            labels.labels.append(row[at].strip())
            labels.lines.append(reader.line_num)
    except csv.Error as error:
        raise DatasetError(f"{path}: line {reader.line_num}: {error}") from None
    if not rows:
        raise DatasetError(f"{path}: no rows after the header")
    return np.asarray(rows, dtype=np.float32), labels


def import_table(source: str | Path, out_dir: str | Path, *, label_column: str,
                 test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0,
                 force: bool = False) -> dict[str, int]:
    """Write ``{out_dir}/train`` (with meta.json) and ``{out_dir}/test``, both or neither
    (fasdl.datasets.output); returns rows per split."""
    check_test_fraction(test_fraction)
    path = Path(source)
    x, written = read_numeric_table(path, label_column)
    y, _, names = encode_labels(written, None)
    check_rows(str(path), x, y)
    train_rows, test_rows = stratified_split(y, test_fraction, seed)
    with staged_output(out_dir, force=force) as staging:
        write_splits(staging, "arrays", (x[train_rows], y[train_rows]),
                     (x[test_rows], y[test_rows]), class_names=names)
    return {"train": len(train_rows), "test": len(test_rows)}
