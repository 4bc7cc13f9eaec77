"""The planner CLI door (issue 15): bad workload files and flags end in exit 2 and one error
naming an argument that exists, with --json printing exactly one JSON object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import pytest

from planner.commands import cli
from planner.commands.cli import build_parser
from tests.planner.cli_helpers import SMALL, run, workload_file


def flags() -> set[str]:
    """Every option of every planner command."""
    parser = build_parser()
    names: set[str] = set()
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for sub in action.choices.values():  # type: ignore[union-attr]
            for option in sub._actions:
                names.update(option.option_strings)
    return names


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"m": 1e300}, "field 'm'"),
    ({"k": 1e-300}, "field 'k'"),
    ({"a": -1}, "field 'a'"),
    ({"b": -5}, "field 'b'"),
    ({"dataset": "datasets/../x"}, "field 'dataset'"),
    ({"name": "squeeze\n"}, "field 'name'"),
    ({"samples": 10**12}, "field 'samples'"),
    ({"kk": 1}, "did you mean 'k'?"),
])
@pytest.mark.parametrize("command", ["plan", "compare"])
def test_bad_workload_fields_blame_workload(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            changes: dict[str, Any], fragment: str,
                                            command: str) -> None:
    code, document, stderr = run(capsys, command, "--workload",
                                 workload_file(tmp_path, **changes), *SMALL)
    assert code == 2 and document["status"] == "error"
    assert document["argument"] == "--workload", document
    assert document["message"].startswith(f"argument --workload: workload file {tmp_path}")
    assert fragment in document["message"] and "Traceback" not in stderr


@pytest.mark.parametrize(("content", "fragment"), [
    (b'{"name": "caf\xe9"}', "is not UTF-8"),
    (b"[" * 10_000 + b"]" * 10_000, "nests 10000 levels"),
    (b"{nope", "is not valid JSON"),
    (b'{"samples": 1' + b"0" * 5000 + b"}", "number of 5001 characters"),
])
def test_unreadable_workload_files_blame_workload(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path, content: bytes,
                                                  fragment: str) -> None:
    path = tmp_path / "workload.json"
    path.write_bytes(content)
    code, document, _ = run(capsys, "plan", "--workload", str(path), *SMALL)
    assert (code, document["argument"]) == (2, "--workload")
    assert fragment in document["message"]


def test_an_unwritable_out_is_refused_before_the_search(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_search(*args: object) -> NoReturn:
        raise AssertionError("the search ran before --out was checked")

    monkeypatch.setattr(cli, "_run_search", no_search)  # a 10 s search on this workload
    for out, fragment in [(tmp_path / "no" / "plan.json", "does not exist"),
                          (tmp_path, "is a folder")]:
        code, document, _ = run(capsys, "plan", "--workload", "squeezenet-cifar10",
                                "--deadline", "3000", "--max-global-batch", "4096",
                                "--epochs", "20", "--out", str(out))
        assert (code, document["argument"]) == (2, "--out")
        assert fragment in document["message"]


def test_out_is_written_whole(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    code, document, _ = run(capsys, "plan", "--workload", "squeezenet-cifar10", *SMALL,
                            "--out", str(out))
    # the file is the plan plus its confidence section (which Plan.load drops)
    written = json.loads(out.read_text())
    assert code == 0 and written == {**document["plan"], "confidence": document["confidence"]}
    # no temporary left: the plan and its profiles (adaptive by default)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "plan.profiles.json"]


@pytest.mark.parametrize(("argv", "argument"), [
    (["--max-global-batch", "100000"], "--max-global-batch"),
    (["--max-global-batch", "0"], "--max-global-batch"),
    (["--epochs", "-3"], "--epochs"),
    (["--deadline", "nan"], "--deadline"),
    (["--deadline", "inf"], "--deadline"),
    (["--min-workers", "5000"], "--min-workers"),
    (["--max-memory", "1"], "--max-memory"),
    (["--region", "xx-invalid-1"], "--region"),
    (["--platform", "/nonexistent.json"], "--platform"),
])
def test_out_of_range_flags_name_themselves(capsys: pytest.CaptureFixture[str],
                                            argv: list[str], argument: str) -> None:
    base = dict(zip(SMALL[::2], SMALL[1::2], strict=True))
    base.update(zip(argv[::2], argv[1::2], strict=True))
    flat = [item for pair in base.items() for item in pair]
    code, document, _ = run(capsys, "plan", "--workload", "squeezenet-cifar10", *flat)
    assert (code, document["argument"]) == (2, argument), document
    assert argument in flags()


def test_frontier_points_are_bounded(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, document, _ = run(capsys, "frontier", "--workload", "squeezenet-cifar10", *SMALL,
                            "--png", str(tmp_path / "f.png"), "--points", "1000000")
    assert (code, document["argument"]) == (2, "--points")


def test_fit_samples_that_are_not_utf8_blame_samples(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"kind": "train", "model": "caf\xe9"}\n')
    code, document, _ = run(capsys, "fit", "--samples", str(path), "--out",
                            str(tmp_path / "w.json"))
    assert (code, document["argument"]) == (2, "--samples")
    assert "s.jsonl:1: is not UTF-8" in document["message"]
