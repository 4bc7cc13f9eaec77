"""python -m fasdl.datasets images / arrays: your own data in the runtime's layout, with
train/meta.json (classes, shapes, the training split's statistics) beside it; the split is
seeded and stratified; every bad input exits 2 with one line naming the problem and writes
nothing. Also: the shipped importers write meta.json too, and it agrees with the rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from fasdl.contract.errors import DatasetError
from fasdl.datasets import build_digits, import_cifar10_binary
from fasdl.datasets.__main__ import main
from fasdl.datasets.cifar10 import CLASS_NAMES
from fasdl.datasets.meta import PER_FEATURE_MAX, STD_FLOOR, read_meta, write_splits
from fasdl.datasets.output import staged_output
from fasdl.training.data import write_dataset
from tests.runtime.cifar_archive import cifar_archive

CLASSES = {"cat": 5, "dog": 6, "eel": 4}  # images per class folder
META_KEYS = ["format", "kind", "input_shape", "classes", "class_names", "samples",
             "test_samples", "mean", "std"]


def _image_folder(root: Path) -> dict[tuple[int, int, int], str]:
    """One folder per class of solid-colour PNGs (one JPEG, one grey PNG) of assorted sizes,
    plus files the importer skips; returns {colour: class}."""
    colours: dict[tuple[int, int, int], str] = {}
    for index, (name, count) in enumerate(CLASSES.items()):
        folder = root / name
        folder.mkdir(parents=True)
        for number in range(count):
            colour = (40 * index + 7 * number, 200 - 30 * number, 11 * number + index)
            Image.new("RGB", (9 + number, 5 + index), colour).save(folder / f"{number}.png")
            colours[colour] = name
        (folder / "notes.txt").write_text("not an image")
        (folder / ".hidden.png").write_bytes(b"skipped")
    Image.new("L", (6, 6), 77).save(root / "cat" / "grey.PNG")  # grey -> RGB (77, 77, 77)
    colours[(77, 77, 77)] = "cat"
    Image.new("RGB", (8, 8), (250, 10, 10)).save(root / "dog" / "photo.jpg", quality=100)
    (root / ".git").mkdir()  # hidden folders are no class
    return colours


def _load(out: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    return (np.load(out / split / "x.npy", allow_pickle=False),
            np.load(out / split / "y.npy", allow_pickle=False))


def _expected_statistics(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per channel of images, per feature of narrow feature rows, else over everything."""
    values = x.astype(np.float64) / (255.0 if x.dtype == np.uint8 else 1.0)
    axes = ((0, 2, 3) if x.ndim == 4 else 0 if x.ndim == 2 and x.shape[1] <= PER_FEATURE_MAX
            else None)
    return values.mean(axis=axes), np.maximum(values.std(axis=axes), STD_FLOOR)


def _check_meta(out: Path, kind: str, *, names: list[str] | None, classes: int) -> dict[str, Any]:
    meta = read_meta(out)
    x, y = _load(out, "train")
    assert list(meta) == META_KEYS
    assert (meta["format"], meta["kind"], meta["classes"], meta["class_names"]) == (
        1, kind, classes, names)
    assert meta["input_shape"] == list(x.shape[1:])
    assert (meta["samples"], meta["test_samples"]) == (len(y), len(_load(out, "test")[1]))
    if kind == "text":
        assert meta["mean"] is None and meta["std"] is None
    else:
        mean, std = _expected_statistics(x)
        np.testing.assert_allclose(meta["mean"], np.atleast_1d(mean), rtol=1e-12)
        np.testing.assert_allclose(meta["std"], np.atleast_1d(std), rtol=1e-12)
    return meta


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("fasdl.datasets: ") and "\n" not in err
    return err


def test_images_are_rgb_resized_labelled_by_sorted_folder_and_split_per_class(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    colours = _image_folder(tmp_path / "src")
    out = tmp_path / "out"
    assert main(["images", str(tmp_path / "src"), str(out), "--size", "4", "6"]) == 0
    line = json.loads(capsys.readouterr().out)
    meta = _check_meta(out, "images", names=["cat", "dog", "eel"], classes=3)
    assert line["rows"] == {"train": 14, "test": 3} and {k: line[k] for k in meta} == meta
    seen: dict[str, list[int]] = {}
    for split in ("train", "test"):
        x, y = _load(out, split)
        assert x.dtype == np.uint8 and x.shape[1:] == (3, 4, 6) and y.dtype == np.int64
        for row, label in zip(x, y, strict=True):
            colour = tuple(int(v) for v in row[:, 0, 0])
            if label == 1 and colour[0] > 240:  # the JPEG: lossy, and solid
                assert np.ptp(row.reshape(3, -1), axis=1).max() <= 2
                continue
            assert (row == np.asarray(colour, dtype=np.uint8)[:, None, None]).all()
            assert ["cat", "dog", "eel"][label] == colours[colour]
        seen[split] = np.bincount(y, minlength=3).tolist()
    # per class round(count x 0.2) to the test split: cat 6 -> 1, dog 7 -> 1, eel 4 -> 1
    assert seen == {"train": [5, 6, 3], "test": [1, 1, 1]}


def test_the_split_is_a_function_of_the_seed(tmp_path: Path) -> None:
    _image_folder(tmp_path / "src")
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        main(["images", str(tmp_path / "src"), str(tmp_path / name), "--size", "2", "2",
              "--seed", str(seed), "--test-fraction", "0.5"])
        runs[name] = [(tmp_path / name / s / f).read_bytes()
                      for s in ("train", "test") for f in ("x.npy", "y.npy")]
    assert runs["a"] == runs["b"] and runs["a"] != runs["c"]


def _case(root: Path, case: str) -> list[str]:
    """A broken image folder and the words its error must contain."""
    if case == "no class folders":
        root.mkdir()
        (root / "loose.png").write_bytes(b"")
        return ["no class folders"]
    for name in ("cat", "dog") if case != "one class" else ("cat",):
        (root / name).mkdir(parents=True)
        Image.new("RGB", (3, 3)).save(root / name / "a.png")
    if case == "empty class":
        (root / "eel").mkdir()
        (root / "eel" / "readme.txt").write_text("")
        return ["eel", "class 'eel' has no images"]
    if case == "unreadable":  # every bad file named, not only the first (issue 43)
        (root / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
        (root / "cat" / "empty.png").write_bytes(b"")
        return ["2 image(s) cannot be imported", "broken.jpg", "empty.png",
                "not a readable image"]
    if case == "gif":
        Image.new("P", (3, 3)).save(root / "dog" / "moving.png", format="GIF")
        return ["moving.png", "a GIF image, expected JPEG or PNG"]
    return ["one class folder (cat), need at least 2 classes"]


@pytest.mark.parametrize("case", ["no class folders", "one class", "empty class", "unreadable",
                                  "gif"])
def test_bad_image_folders_exit_2_naming_the_problem(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    words = _case(tmp_path / "src", case)
    assert main(["images", str(tmp_path / "src"), str(tmp_path / "out"), "--size", "4",
                 "4"]) == 2
    err = _one_line_error(capsys)
    assert all(word in err for word in words), err
    assert not (tmp_path / "out").exists()


def test_bad_sizes_and_fractions_name_the_argument(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _image_folder(tmp_path / "src")
    for args, words in ((["--size", "0", "4"], "--size H must be in [1, 4096], got 0"),
                        (["--size", "4", "5000"], "--size W must be in [1, 4096], got 5000"),
                        (["--size", "4", "4", "--test-fraction", "1"],
                         "test_fraction must be in (0, 1), got 1.0"),
                        (["--size", "4", "4", "--seed", "-1"], "seed must be in [0, 2**63)")):
        assert main(["images", str(tmp_path / "src"), str(tmp_path / "out"), *args]) == 2
        assert words in _one_line_error(capsys)
    assert not (tmp_path / "out").exists()


def test_feature_rows_from_two_npy_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    # features on scales 1,000x apart (issue 43): each gets its own mean and std
    x = (rng.normal(3.0, 2.0, (50, 5)) * np.array([1, 10, 100, 1000, 0.001])).astype(np.float32)
    y = np.repeat(np.arange(3, dtype=np.int16), [20, 20, 10])  # any integer dtype
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    assert main(["arrays", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"),
                 str(tmp_path / "out")]) == 0
    meta = _check_meta(tmp_path / "out", "arrays", names=None, classes=3)
    assert meta["input_shape"] == [5] and len(meta["mean"]) == 5  # one pair per feature
    assert meta["std"][3] / meta["std"][0] > 500
    train, test = _load(tmp_path / "out", "train"), _load(tmp_path / "out", "test")
    assert train[0].dtype == np.float32 and train[1].dtype == np.int64
    assert np.bincount(test[1]).tolist() == [4, 4, 2]
    together = np.concatenate([train[0], test[0]])  # every row once, with its own label
    order = np.lexsort(together.T)
    np.testing.assert_array_equal(together[order], x[np.lexsort(x.T)])
    labels = np.concatenate([train[1], test[1]])[order]
    np.testing.assert_array_equal(labels, y[np.lexsort(x.T)])


def test_wide_feature_rows_get_one_pair_that_fits_the_plan(tmp_path: Path) -> None:
    """Past PER_FEATURE_MAX features the pairs would not fit the trigger's 3 KiB plan."""
    x = np.random.default_rng(1).normal(size=(40, PER_FEATURE_MAX + 1)).astype(np.float32)
    np.savez(tmp_path / "wide.npz", x=x, y=np.arange(40) % 2)
    assert main(["arrays", str(tmp_path / "wide.npz"), str(tmp_path / "out")]) == 0
    meta = _check_meta(tmp_path / "out", "arrays", names=None, classes=2)
    assert len(meta["mean"]) == len(meta["std"]) == 1


def test_image_rows_and_text_rows_from_an_npz(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (30, 3, 4, 4), dtype=np.uint8)
    labels = np.arange(30) % 2
    np.savez(tmp_path / "images.npz", x=images, y=labels)
    assert main(["arrays", str(tmp_path / "images.npz"), str(tmp_path / "img"),
                 "--seed", "5"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["kind"] == "arrays" and line["input_shape"] == [3, 4, 4]
    assert len(_check_meta(tmp_path / "img", "arrays", names=None, classes=2)["mean"]) == 3
    tokens = np.zeros((10, 2, 6), dtype=np.int32)
    np.savez(tmp_path / "text.npz", x=tokens, y=np.arange(10) % 2)
    assert main(["arrays", str(tmp_path / "text.npz"), str(tmp_path / "txt")]) == 0
    assert read_meta(tmp_path / "txt")["mean"] is None


def _bad_arrays(folder: Path, case: str) -> tuple[list[str], str]:
    x, y = np.zeros((6, 4), dtype=np.float32), np.arange(6) % 2
    arrays = {"labels from 1": (x, y + 1), "float64": (x.astype(np.float64), y),
              "nan": (np.full_like(x, np.nan), y), "rows": (x[:5], y),
              "3-d rows": (np.zeros((6, 2, 2, 2, 2), np.float32), y),
              "one class": (x, np.zeros(6, np.int64))}
    words = {"labels from 1": "y.npy: y: labels must be 0..n-1 with every class present; "
                              "label 0 never occurs (labels run 1..2)",
             "float64": "x dtype float64 not in uint8/float32 (images) or int32 (text)",
             "nan": "x holds NaN or infinite values", "rows": "x has 5 rows, y has 6",
             "3-d rows": "rows must be N x C x H x W (images) or N x F",
             "one class": "n >= 2 classes, got only label 0"}
    if case == "npz without y":
        np.savez(folder / "d.npz", x=x, labels=y)
        return [str(folder / "d.npz")], "d.npz: no array y (it holds x, labels)"
    if case == "object array":
        np.save(folder / "x.npy", np.array([{"a": 1}] * 6, dtype=object), allow_pickle=True)
        np.save(folder / "y.npy", y)
        return [str(folder / "x.npy"), str(folder / "y.npy")], "x.npy: not a readable .npy"
    np.save(folder / "x.npy", arrays[case][0])
    np.save(folder / "y.npy", arrays[case][1])
    return [str(folder / "x.npy"), str(folder / "y.npy")], words[case]


@pytest.mark.parametrize("case", ["labels from 1", "float64", "nan", "rows", "3-d rows",
                                  "one class", "npz without y", "object array"])
def test_bad_arrays_exit_2_naming_the_problem(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              case: str) -> None:
    paths, words = _bad_arrays(tmp_path, case)
    assert main(["arrays", *paths, str(tmp_path / "out")]) == 2
    err = _one_line_error(capsys)
    assert words in err, err
    assert not (tmp_path / "out").exists()


def test_arrays_wants_two_or_three_paths(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["arrays", "a", "b", "c", str(tmp_path / "out")]) == 2
    assert "expected X.npy Y.npy OUT or DATA.npz OUT, got 4 paths" in _one_line_error(capsys)


def test_the_shipped_importers_write_meta_too(tmp_path: Path) -> None:
    build_digits(tmp_path / "digits")
    meta = _check_meta(tmp_path / "digits", "images", names=[str(d) for d in range(10)],
                       classes=10)
    assert meta["input_shape"] == [1, 8, 8] and len(meta["mean"]) == 1
    import_cifar10_binary(cifar_archive(tmp_path / "c.tar.gz"), tmp_path / "cifar")
    assert len(_check_meta(tmp_path / "cifar", "images", names=list(CLASS_NAMES),
                           classes=10)["std"]) == 3


def test_meta_that_disagrees_with_the_rows_is_never_published(tmp_path: Path) -> None:
    x, y = np.zeros((4, 1, 2, 2), np.uint8), np.array([0, 1, 0, 1])
    with pytest.raises(DatasetError, match="says 4 training and 2 test rows, the splits hold "
                                           "4 and 1"), staged_output(tmp_path / "out") as stage:
        write_splits(stage, "images", (x, y), (x[:2], y[:2]))
        write_dataset(stage / "test", x[:1], y[:1])  # a test split changed after the meta
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ---- table: a numeric CSV ----------------------------------------------------------------------
def test_a_numeric_csv_becomes_feature_rows_with_named_classes(tmp_path: Path) -> None:
    """Issue 43: tabular data without numpy: features on scales 1,000x apart, named labels."""
    rng = np.random.default_rng(2)
    lines = ["age,income,species,ratio"]
    for row in range(60):
        lines.append(f"{rng.integers(18, 90)},{rng.normal(50_000, 9_000):.2f},"
                     f"{'cat' if row % 3 else 'dog'},{rng.random():.4f}")
    (tmp_path / "data.csv").write_text("\n".join(lines) + "\n\n")  # a trailing blank line
    assert main(["table", str(tmp_path / "data.csv"), str(tmp_path / "out"),
                 "--label-column", "species"]) == 0
    meta = _check_meta(tmp_path / "out", "arrays", names=["cat", "dog"], classes=2)
    assert meta["input_shape"] == [3] and len(meta["mean"]) == 3
    assert 18 < meta["mean"][0] < 90 and 40_000 < meta["mean"][1] < 60_000  # each its own
    train, test = _load(tmp_path / "out", "train"), _load(tmp_path / "out", "test")
    assert train[0].dtype == np.float32 and len(train[1]) + len(test[1]) == 60
    assert set(np.concatenate([train[1], test[1]]).tolist()) == {0, 1}


@pytest.mark.parametrize(("text", "message"), [
    ("a,b\n1,2\n", "--label-column 'label' is not a column of the header (columns: a, b)"),
    ("label\n1\n0\n", "no column besides the label"),
    ("a,label\n1,0\nx,1\n", "line 3: column 'a': 'x' is not a finite number"),
    ("a,label\n1,0\nnan,1\n", "line 3: column 'a': 'nan' is not a finite number"),
    ("a,label\n1,0\n,1\n", "line 3: column 'a': '' is not a finite number"),
    ("a,label\n1,0\n2\n", "line 3: 1 columns, the header has 2"),
    ("a,label\n1,0\n2,\n", "line 3: empty label"),
    ("a,label\n", "no rows after the header"),
])
def test_a_bad_table_exits_2_naming_the_line_and_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    (tmp_path / "bad.csv").write_text(text)
    assert main(["table", str(tmp_path / "bad.csv"), str(tmp_path / "out"),
                 "--label-column", "label"]) == 2
    assert message in _one_line_error(capsys)
    assert not (tmp_path / "out").exists()
