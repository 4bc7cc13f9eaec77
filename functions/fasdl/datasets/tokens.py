"""The text importers' one tokenizing path (``cola`` and ``text``): WordPiece, uncased, BERT's
special tokens (the ``tokenizers`` package, import time only: workers read token ids).

Each sentence becomes ``[CLS] ... [SEP]``, truncated or padded to ``max_length``, as an int32
row of two lines (token ids; attention mask). The vocabulary used is written beside the splits
as ``vocab.txt``: a given one (e.g. BERT-Base-uncased's 30,522 tokens) or one built from the
training sentences (:func:`train_vocab`); the same files always give the same vocabulary and
arrays.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np

from fasdl.contract.errors import DatasetError
from fasdl.training.data import TEXT_DTYPE

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
DEFAULT_MAX_LENGTH = 64  # CoLA's longest sentences are ~45 words; few need more pieces
DEFAULT_VOCAB_SIZE = 1024  # bert-mini's vocabulary (fasdl.training.text_networks)
MAX_VOCAB_SIZE = 100_000


def check_sizes(max_length: int, vocab_size: int) -> None:
    """``max_length`` and ``vocab_size`` in range, or a ValueError naming the argument."""
    if not 3 <= max_length <= 512:
        raise ValueError(f"max_length must be in [3, 512] (BERT's positions), got {max_length}")
    if not len(SPECIAL_TOKENS) < vocab_size <= MAX_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be in [{len(SPECIAL_TOKENS) + 1}, {MAX_VOCAB_SIZE}],"
                         f" got {vocab_size}")


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


def tokenize_splits(staging: Path, sentences: dict[str, list[str]], *,
                    vocab: str | Path | None, vocab_size: int, max_length: int
                    ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Every split's x (int32 N×2×L), with ``staging/vocab.txt`` (``vocab`` copied, or one
    trained on ``sentences["train"]``); and ``{"vocab_size", "truncated"}``."""
    if vocab is None:
        used = train_vocab(sentences["train"], vocab_size, staging / "vocab.txt")
    else:
        used = Path(shutil.copyfile(vocab, staging / "vocab.txt"))
    tokenizer = _tokenizer(used, max_length)
    summary = {"vocab_size": int(tokenizer.get_vocab_size()), "truncated": 0}
    rows: dict[str, np.ndarray] = {}
    for split, texts in sentences.items():
        rows[split], truncated = encode(tokenizer, texts, max_length)
        summary["truncated"] += truncated
    return rows, summary
