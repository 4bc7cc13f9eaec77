"""python -m fasdl.datasets text: any TSV/CSV with a header, named columns and any number of
labels, tokenized by the very path ``cola`` uses; bad files exit 2 naming file and line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fasdl.datasets.__main__ import main
from fasdl.datasets.cola import import_cola, read_tsv
from fasdl.datasets.meta import read_meta
from fasdl.datasets.text import import_text
from fasdl.datasets.textset import write_textset
from fasdl.training.data import TEXT_DTYPE

MOODS = ("pos", "neg", "neutral")


def _csv(path: Path, rows: int = 30) -> Path:
    lines = ["id,sentence,label"]
    for row in range(rows):
        mood = MOODS[row % 3]
        lines.append(f'{row},"The {mood} film, number {row}, was {mood}.",{mood}')
    path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8-sig")  # Excel's CSV
    return path


def _load(out: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    return (np.load(out / split / "x.npy", allow_pickle=False),
            np.load(out / split / "y.npy", allow_pickle=False))


def test_named_labels_map_to_sorted_classes_and_split_per_class(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["text", str(_csv(tmp_path / "reviews.csv")), str(out), "--text-column",
                 "sentence", "--label-column", "label", "--max-length", "12"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["rows"] == {"train": 24, "test": 6} and line["max_length"] == 12
    meta = read_meta(out)
    assert {k: line[k] for k in meta} == meta
    assert meta == {"format": 1, "kind": "text", "input_shape": [2, 12], "classes": 3,
                    "class_names": ["neg", "neutral", "pos"], "samples": 24,
                    "test_samples": 6, "mean": None, "std": None}
    vocab = (out / "vocab.txt").read_text().splitlines()
    for split in ("train", "test"):
        x, y = _load(out, split)
        assert x.dtype == TEXT_DTYPE and x.shape[1:] == (2, 12)
        assert np.bincount(y).tolist() == ([8, 8, 8] if split == "train" else [2, 2, 2])
        for row, label in zip(x, y, strict=True):  # the label names the mood in the text
            words = [vocab[i] for i in row[0][:int(row[1].sum())]]
            assert words[:3] == ["[CLS]", "the", meta["class_names"][label]]


def test_integer_labels_and_a_dev_file_tokenize_exactly_as_cola(tmp_path: Path) -> None:
    """CoLA's files with a header row, through ``text``: the same arrays as ``cola``."""
    write_textset(tmp_path / "tsv", seed=1, sentences=80)
    import_cola(tmp_path / "tsv", tmp_path / "cola", max_length=16)
    for name in ("train.tsv", "dev.tsv"):
        rows = (tmp_path / "tsv" / name).read_text().splitlines()
        (tmp_path / f"headed-{name}").write_text("\n".join(
            ["source\tlabel\tmark\tsentence", *rows]) + "\n")
    summary = import_text(tmp_path / "headed-train.tsv", tmp_path / "text",
                          text_column="sentence", label_column="label",
                          dev=tmp_path / "headed-dev.tsv", max_length=16)
    assert summary["train"] == 80 and summary["test"] == 20
    for split in ("train", "test"):
        for got, want in zip(_load(tmp_path / "text", split), _load(tmp_path / "cola", split),
                             strict=True):
            np.testing.assert_array_equal(got, want)
    assert (tmp_path / "text" / "vocab.txt").read_bytes() == \
        (tmp_path / "cola" / "vocab.txt").read_bytes()
    assert read_meta(tmp_path / "text")["class_names"] is None  # integer labels
    assert read_meta(tmp_path / "cola")["class_names"] == ["unacceptable", "acceptable"]
    assert read_tsv(tmp_path / "tsv" / "train.tsv").labels == \
        _load(tmp_path / "cola", "train")[1].tolist()


def test_the_split_is_a_function_of_the_seed(tmp_path: Path) -> None:
    source = _csv(tmp_path / "r.csv")
    arrays = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        import_text(source, tmp_path / name, text_column="sentence", label_column="label",
                    seed=seed, max_length=8)
        arrays[name] = [(tmp_path / name / "train" / f).read_bytes() for f in ("x.npy", "y.npy")]
    assert arrays["a"] == arrays["b"] and arrays["a"] != arrays["c"]


BAD = {
    "no column": ("sentence,b\n1,x\n", [], "--label-column 'label' is not a column of the header "
                                    "(columns: sentence, b)"),
    "short row": ("sentence,label\nfine,1\nno label here\n", [], "line 3: 1 columns, the "
                                                                  "header has 2"),
    "empty text": ("sentence,label\nfine,0\n  ,1\n", [], "line 3: empty text"),
    "one class": ("sentence,label\na,x\nb,x\n", [], "labels must name at least 2 classes"),
    "gap": ("sentence,label\na,0\nb,2\n", [], "label 1 never occurs"),
    "dev label": ("sentence,label\na,x\nb,y\n", ["--dev", "DEV"],
                  "dev.csv: line 3: label 'z' does not occur in"),
    "not utf-8": (b"sentence,label\na,x\nb\xe9,y\n", [], "line 3: not UTF-8"),
    "empty": ("", [], "line 1: empty file, expected a header row"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_exit_2_naming_file_and_line(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               case: str) -> None:
    content, extra, words = BAD[case]
    source = tmp_path / "data.csv"
    if isinstance(content, bytes):
        source.write_bytes(content)
    else:
        source.write_text(content)
    (tmp_path / "dev.csv").write_text("sentence,label\nc,x\nd,z\n")
    extra = [str(tmp_path / "dev.csv") if arg == "DEV" else arg for arg in extra]
    assert main(["text", str(source), str(tmp_path / "out"), "--text-column", "sentence",
                 "--label-column", "label", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fasdl.datasets: ") and "\n" not in err
    assert words in err, err
    assert not (tmp_path / "out").exists()


def test_only_tsv_and_csv_files_and_distinct_columns(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "data.txt").write_text("sentence,label\na,0\n")
    for source, columns, words in (
            ("data.txt", ["sentence", "label"], "data.txt: expected a .tsv or .csv file"),
            ("data.txt", ["label", "label"], "--text-column and --label-column name the same")):
        assert main(["text", str(tmp_path / source), str(tmp_path / "out"), "--text-column",
                     columns[0], "--label-column", columns[1]]) == 2
        assert words in capsys.readouterr().err
