"""python -m fasdl.datasets textset / cola: the generated set is CoLA's format, the importer
round-trips sentences into the runtime's int32 (ids; mask) rows, and every bad file exits 2
naming the file and the line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fasdl.datasets.__main__ import main
from fasdl.datasets.cola import import_cola, read_tsv
from fasdl.datasets.textset import write_textset
from fasdl.training.data import TEXT_DTYPE


@pytest.fixture(scope="module")
def textset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("textset")
    write_textset(folder, seed=3, sentences=200)
    return folder


def _cola(folder: Path, train: bytes, dev: bytes | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.tsv").write_bytes(train)
    (folder / "dev.tsv").write_bytes(dev if dev is not None else train)
    return folder


def test_textset_is_cola_format_seeded_and_dev_is_unseen(textset: Path, tmp_path: Path) -> None:
    train, dev = read_tsv(textset / "train.tsv"), read_tsv(textset / "dev.tsv")
    assert len(train.labels) == 200 and len(dev.labels) == 50
    assert 0.3 < np.mean(train.labels) < 0.7  # about half corrupted
    assert not set(train.sentences) & set(dev.sentences)
    for line in (textset / "train.tsv").read_text().splitlines():
        source, label, mark, _ = line.split("\t")
        assert source == "fasdl-textset" and mark == ("*" if label == "0" else "")
    write_textset(tmp_path / "again", seed=3, sentences=200)
    assert (tmp_path / "again" / "train.tsv").read_bytes() == (textset / "train.tsv").read_bytes()
    write_textset(tmp_path / "other", seed=4, sentences=200)
    assert (tmp_path / "other" / "train.tsv").read_bytes() != (textset / "train.tsv").read_bytes()


def test_import_round_trips_sentences_into_ids_and_masks(textset: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    out = tmp_path / "out"
    assert main(["cola", str(textset), str(out), "--max-length", "16"]) == 0
    line = json.loads(capsys.readouterr().out)
    vocab = (out / "vocab.txt").read_text().splitlines()
    assert line["rows"] == {"train": 200, "test": 50} and line["vocab_size"] == len(vocab)
    train = read_tsv(textset / "train.tsv")
    x, y = np.load(out / "train" / "x.npy"), np.load(out / "train" / "y.npy")
    assert x.dtype == TEXT_DTYPE and x.shape == (200, 2, 16) and y.dtype == np.int64
    assert y.tolist() == train.labels
    assert np.load(out / "test" / "x.npy").shape == (50, 2, 16)
    for row, sentence in zip(x[:20], train.sentences[:20], strict=True):
        length = int(row[1].sum())
        assert row[1].tolist() == [1] * length + [0] * (16 - length)  # mask: real, then pad
        tokens = [vocab[i] for i in row[0][:length]]
        words = sentence.lower().removesuffix(".").split()
        assert tokens == ["[CLS]", *words, ".", "[SEP]"]  # every word is in the vocabulary
        assert set(row[0][length:].tolist()) <= {vocab.index("[PAD]")}
    again = tmp_path / "again"
    import_cola(textset, again, max_length=16)  # the same files, the same arrays
    assert np.array_equal(np.load(again / "train" / "x.npy"), x)


def test_a_given_vocabulary_is_used_and_truncation_counted(tmp_path: Path) -> None:
    folder = _cola(tmp_path / "cola", b"src\t1\t\tThe zebra sleeps today .\n"
                                      b"src\t0\t*\tSleeps the zebra .\n")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",
                                "sleeps", "zeb", "##ra", "."]) + "\n")
    summary = import_cola(folder, tmp_path / "out", vocab=vocab, max_length=5)
    assert summary["vocab_size"] == 10 and summary["truncated"] == 4  # both splits, both rows
    assert (tmp_path / "out" / "vocab.txt").read_text() == vocab.read_text()
    x = np.load(tmp_path / "out" / "train" / "x.npy")
    assert x[0, 0].tolist() == [2, 5, 7, 8, 3]  # [CLS] the zeb ##ra [SEP], truncated
    assert x[1, 0].tolist() == [2, 6, 5, 7, 3]


@pytest.mark.parametrize(("content", "line", "why"), [
    (b"", 1, "empty file"),
    (b"src\t1\t\tGood.\nsrc\t1\tno tab here\n", 2, "3 tab-separated columns, expected 4"),
    (b"src\t1\t\tGood.\nsrc\t1\t\tGood.\nsrc\t2\t\tBad label.\n", 3, "label '2'"),
    (b"src\t1\t\tGood.\nsrc\t0\t*\tCaf\xe9 au lait.\n", 2, "not UTF-8"),
    (b"src\t1\t\t \n", 1, "empty sentence"),
])
@pytest.mark.parametrize("damaged", ["train.tsv", "dev.tsv"])
def test_bad_files_exit_2_naming_file_and_line(tmp_path: Path, content: bytes, line: int,
                                               why: str, damaged: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    good = b"src\t1\t\tThe dog sleeps.\n"
    folder = _cola(tmp_path / "cola", content if damaged == "train.tsv" else good,
                   content if damaged == "dev.tsv" else good)
    assert main(["cola", str(folder), str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("fasdl.datasets: ") and "\n" not in error
    assert f"{folder / damaged}: line {line}: " in error and why in error
    assert not (tmp_path / "out").exists()  # nothing written


def test_missing_file_vocab_and_bad_lengths_exit_2(textset: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cola", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "train.tsv: cannot read" in capsys.readouterr().err
    assert main(["cola", str(textset), str(tmp_path / "out"), "--max-length", "2"]) == 2
    assert "max_length must be in [3, 512]" in capsys.readouterr().err
    bad_vocab = tmp_path / "bad.txt"
    bad_vocab.write_text("the\ndog\n")
    assert main(["cola", str(textset), str(tmp_path / "out"), "--vocab", str(bad_vocab)]) == 2
    assert "needs [PAD], [UNK], [CLS], [SEP]" in capsys.readouterr().err
    assert main(["textset", str(textset)]) == 2  # never over existing files
    assert "exists; pass --force" in capsys.readouterr().err
