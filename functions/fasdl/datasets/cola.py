"""Import CoLA (GLUE's ``train.tsv`` and ``dev.tsv``) into the runtime's row layout.

Each file has four tab-separated columns and no header: source, label (0 unacceptable,
1 acceptable), the original '*' mark (or nothing), sentence. Sentences are tokenized with
WordPiece (fasdl.datasets.tokens, the text importers' one tokenizing path) into
``[CLS] ... [SEP]``, truncated or padded to ``max_length``, and written as
``train/{x,y}.npy`` and ``test/{x,y}.npy`` (the dev split: CoLA's test labels are not
public) with fasdl.datasets.output, both or neither: x is int32 N×2×L (token ids; attention
mask), y int64; ``train/meta.json`` (fasdl.datasets.meta) names the classes. The vocabulary
used is written beside them as ``vocab.txt``: a given ``--vocab`` (e.g. BERT-Base-uncased's
30,522 tokens) or, without one, a WordPiece vocabulary built from the training sentences (at
most ``vocab_size`` tokens, fasdl.datasets.tokens.train_vocab); the same files always give
the same vocabulary and arrays. Workers need no tokenizer: the import does all of it.

A bad file (not UTF-8, empty, a line without four columns, a label other than 0/1, an empty
sentence) raises :class:`DatasetError` naming the file and the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fasdl.contract.errors import DatasetError
from fasdl.datasets.meta import write_splits
from fasdl.datasets.output import staged_output
from fasdl.datasets.tokens import (
    DEFAULT_MAX_LENGTH,
    DEFAULT_VOCAB_SIZE,
    check_sizes,
    tokenize_splits,
)

SPLIT_FILES = {"train": "train.tsv", "test": "dev.tsv"}  # runtime split <- CoLA file
CLASS_NAMES = ("unacceptable", "acceptable")
MAX_FILE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Labelled:
    labels: list[int]
    sentences: list[str]


def read_tsv(path: Path) -> Labelled:
    """Labels and sentences of one CoLA file; errors name the file and the line."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise DatasetError(f"{path}: cannot read ({error.strerror or error})") from error
    if len(raw) > MAX_FILE_BYTES:
        raise DatasetError(f"{path}: {len(raw)} bytes, more than a CoLA file's "
                           f"{MAX_FILE_BYTES} allowed")
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":  # the final newline ends the last line, no line after it
        lines.pop()
    if not lines:
        raise DatasetError(f"{path}: line 1: empty file, expected one sentence per line")
    labelled = Labelled([], [])
    for number, line in enumerate(lines, start=1):
        label, sentence = _parse_line(path, number, line)
        labelled.labels.append(label)
        labelled.sentences.append(sentence)
    return labelled


def _parse_line(path: Path, number: int, line: bytes) -> tuple[int, str]:
    try:
        text = line.decode("utf-8").removesuffix("\r")
    except UnicodeDecodeError as error:
        raise DatasetError(f"{path}: line {number}: not UTF-8 (byte {error.start})") from None
    columns = text.split("\t")
    if len(columns) != 4:
        raise DatasetError(f"{path}: line {number}: {len(columns)} tab-separated columns, "
                           "expected 4 (source, label, original label, sentence)")
    if columns[1] not in ("0", "1"):
        raise DatasetError(f"{path}: line {number}: label {columns[1][:20]!r}, expected 0 "
                           "(unacceptable) or 1 (acceptable)")
    if not columns[3].strip():
        raise DatasetError(f"{path}: line {number}: empty sentence")
    return int(columns[1]), columns[3].strip()


def import_cola(cola_dir: str | Path, out_dir: str | Path, *, vocab: str | Path | None = None,
                max_length: int = DEFAULT_MAX_LENGTH, vocab_size: int = DEFAULT_VOCAB_SIZE,
                force: bool = False) -> dict[str, int]:
    """Write ``{out_dir}/train``, ``{out_dir}/test`` and ``{out_dir}/vocab.txt``, all or
    nothing; returns rows per split, ``vocab_size`` and ``truncated`` sentences."""
    check_sizes(max_length, vocab_size)
    folder = Path(cola_dir)
    splits = {split: read_tsv(folder / name) for split, name in SPLIT_FILES.items()}
    with staged_output(out_dir, force=force) as staging:
        rows, summary = tokenize_splits(
            staging, {split: labelled.sentences for split, labelled in splits.items()},
            vocab=vocab, vocab_size=vocab_size, max_length=max_length)
        labels = {split: np.asarray(labelled.labels, dtype=np.int64)
                  for split, labelled in splits.items()}
        write_splits(staging, "text", (rows["train"], labels["train"]),
                     (rows["test"], labels["test"]), class_names=CLASS_NAMES)
    return {**summary, **{split: len(labels[split]) for split in SPLIT_FILES}}
