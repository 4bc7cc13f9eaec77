"""Import CoLA (GLUE's ``train.tsv`` and ``dev.tsv``) into the runtime's row layout.

Each file has four tab-separated columns and no header: source, label (0 unacceptable,
1 acceptable), the original '*' mark (or nothing), sentence. Sentences are tokenized with
WordPiece (the ``tokenizers`` package, uncased, BERT's special tokens) into
``[CLS] ... [SEP]``, truncated or padded to ``max_length``, and written as
``train/{x,y}.npy`` and ``test/{x,y}.npy`` (the dev split: CoLA's test labels are not
public) with fasdl.datasets.output, both or neither: x is int32 N×2×L (token ids; attention
mask), y int64. The vocabulary used is written beside them as ``vocab.txt``: a given
``--vocab`` (e.g. BERT-Base-uncased's 30,522 tokens) or, without one, a WordPiece vocabulary
built from the training sentences (at most ``vocab_size`` tokens, :func:`train_vocab`); the
same files always give the same vocabulary and arrays. Workers need no
tokenizer: the import does all of it.

A bad file (not UTF-8, empty, a line without four columns, a label other than 0/1, an empty
sentence) raises :class:`DatasetError` naming the file and the line.
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fasdl.datasets.output import staged_output
from fasdl.training.data import TEXT_DTYPE, DatasetError, write_dataset

SPLIT_FILES = {"train": "train.tsv", "test": "dev.tsv"}  # runtime split <- CoLA file
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
DEFAULT_MAX_LENGTH = 64  # CoLA's longest sentences are ~45 words; few need more pieces
DEFAULT_VOCAB_SIZE = 1024  # bert-mini's vocabulary (fasdl.training.text_networks)
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


def _tokenizer(vocab: Path, max_length: int):  # type: ignore[no-untyped-def]
    """BERT's uncased WordPiece over ``vocab``: [CLS] ... [SEP], padded to ``max_length``."""
    from tokenizers import BertWordPieceTokenizer  # import time only, never in a worker

    words = vocab.read_text(encoding="utf-8").splitlines()
    missing = [token for token in SPECIAL_TOKENS[:4] if token not in words]
    if missing:
        raise DatasetError(f"{vocab}: a WordPiece vocabulary needs {', '.join(missing)}")
    tokenizer = BertWordPieceTokenizer(str(vocab), lowercase=True)
    tokenizer.enable_truncation(max_length)
    tokenizer.enable_padding(length=max_length, pad_id=words.index("[PAD]"), pad_token="[PAD]")
    return tokenizer


def train_vocab(sentences: list[str], vocab_size: int, out: Path) -> Path:
    """A WordPiece vocabulary of at most ``vocab_size`` tokens learnt from ``sentences``:
    BERT's special tokens, every character of the training words alone and as a ``##``
    continuation (so an unseen word is spelt, not [UNK]), then the most frequent words
    (ties alphabetical). Built here rather than by tokenizers' WordPiece trainer, which
    breaks ties between equally frequent merges in hash order: the same file gave another
    vocabulary, so other token ids, on every run."""
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer

    normalizer, pre_tokenizer = BertNormalizer(lowercase=True), BertPreTokenizer()
    counts: Counter[str] = Counter()
    for sentence in sentences:  # the tokenizer's own uncased normalisation and splitting
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(
            normalizer.normalize_str(sentence)))
    alphabet = sorted({character for word in counts for character in word})
    pieces = [*SPECIAL_TOKENS, *alphabet, *(f"##{character}" for character in alphabet)]
    if len(pieces) > vocab_size:
        raise DatasetError(f"vocab_size {vocab_size} cannot hold the special tokens and the "
                           f"{len(alphabet)} characters of the training split "
                           f"({len(pieces)} tokens)")
    words = sorted((word for word in counts if word not in pieces),
                   key=lambda word: (-counts[word], word))
    vocab = [*pieces, *words[:vocab_size - len(pieces)]]
    out.write_text("".join(f"{token}\n" for token in vocab), encoding="utf-8")
    return out


def encode(tokenizer, sentences: list[str], max_length: int  # type: ignore[no-untyped-def]
           ) -> tuple[np.ndarray, int]:
    """x as int32 N×2×L (ids; mask) and how many sentences were truncated."""
    encodings = tokenizer.encode_batch(sentences)
    x = np.empty((len(sentences), 2, max_length), dtype=TEXT_DTYPE)
    x[:, 0] = [encoding.ids for encoding in encodings]
    x[:, 1] = [encoding.attention_mask for encoding in encodings]
    return x, sum(1 for encoding in encodings if encoding.overflowing)


def import_cola(cola_dir: str | Path, out_dir: str | Path, *, vocab: str | Path | None = None,
                max_length: int = DEFAULT_MAX_LENGTH, vocab_size: int = DEFAULT_VOCAB_SIZE,
                force: bool = False) -> dict[str, int]:
    """Write ``{out_dir}/train``, ``{out_dir}/test`` and ``{out_dir}/vocab.txt``, all or
    nothing; returns rows per split, ``vocab_size`` and ``truncated`` sentences."""
    if not 3 <= max_length <= 512:
        raise ValueError(f"max_length must be in [3, 512] (BERT's positions), got {max_length}")
    if not len(SPECIAL_TOKENS) < vocab_size <= 100_000:
        raise ValueError(f"vocab_size must be in [6, 100000], got {vocab_size}")
    folder = Path(cola_dir)
    splits = {split: read_tsv(folder / name) for split, name in SPLIT_FILES.items()}
    summary: dict[str, int] = {"truncated": 0}
    with staged_output(out_dir, force=force) as staging:
        if vocab is None:
            used = train_vocab(splits["train"].sentences, vocab_size, staging / "vocab.txt")
        else:
            used = Path(shutil.copyfile(vocab, staging / "vocab.txt"))
        tokenizer = _tokenizer(used, max_length)
        summary["vocab_size"] = tokenizer.get_vocab_size()
        for split, labelled in splits.items():
            x, truncated = encode(tokenizer, labelled.sentences, max_length)
            write_dataset(staging / split, x, np.asarray(labelled.labels, dtype=np.int64))
            summary[split] = len(labelled.labels)
            summary["truncated"] += truncated
    return summary
