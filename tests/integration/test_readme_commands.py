"""The README's commands run as shown. Every fenced shell block of README.md and of the guides
in docs/ that the line before its fence marks with ``<!-- readme-test -->`` is run, command
by command, with bash, in a fresh temporary folder that links the repository's ``.venv``
(docs/development.md says what may be marked: commands that need no AWS account, no network
and no long run). The README stays a front page: at most 250 lines."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
MARKER = "<!-- readme-test -->"
SHELL_FENCES = ("```bash", "```sh", "```shell")
MAX_README_LINES = 250
BLOCK_TIMEOUT_S = 120
# Never marked: they need an AWS account, build for minutes, or run the whole suite.
UNMARKABLE = ("aws ", "npx ", "cdk ", "make ", "pip ")


@dataclass(frozen=True)
class Block:
    """A marked block: where it is and its commands, continuation lines joined."""

    document: str
    line: int  # 1-based line of the opening fence
    commands: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.document}:{self.line}"


def _commands(lines: list[str]) -> tuple[str, ...]:
    commands: list[str] = []
    pending = ""
    for raw in lines:
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        commands.append(pending + line)
        pending = ""
    assert not pending, f"a continuation line ends the block: {pending!r}"
    return tuple(commands)


def marked_blocks(text: str, document: str) -> list[Block]:
    """The blocks of ``text`` whose fence follows the marker line; a marker before anything but
    a shell fence, or an unclosed fence, is an error."""
    lines = text.splitlines()
    blocks = []
    for index, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        fence = lines[index + 1].strip() if index + 1 < len(lines) else ""
        assert fence in SHELL_FENCES, (
            f"{document}:{index + 1}: {MARKER} must be followed by a shell fence, got {fence!r}")
        body_start = index + 2
        ends = [i for i in range(body_start, len(lines)) if lines[i].strip() == "```"]
        assert ends, f"{document}:{index + 2}: the marked block is not closed"
        blocks.append(Block(document, index + 2, _commands(lines[body_start:ends[0]])))
    return blocks


def _documents() -> list[Path]:
    return [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]


BLOCKS = [block for path in _documents()
          for block in marked_blocks(path.read_text(), path.relative_to(REPO_ROOT).as_posix())]


def test_the_readme_is_a_front_page_with_its_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines; at most {MAX_README_LINES}: move detail to docs/")
    assert any(line.startswith("make run") for line in lines)
    assert any(line.startswith("make test") for line in lines)


def test_the_readme_marks_its_runnable_commands() -> None:
    readme = [command for block in BLOCKS if block.document == "README.md"
              for command in block.commands]
    assert any(" -m planner plan " in command for command in readme), readme
    assert any(" -m fasdl.datasets digits " in command for command in readme), readme
    for block in BLOCKS:
        assert block.commands, f"{block.name}: a marked block without a command"
        for command in block.commands:
            assert not command.startswith(UNMARKABLE), (
                f"{block.name}: {command!r} needs AWS or a long build; do not mark its block")


def test_marker_parsing() -> None:
    text = "\n".join(["x", MARKER, "```bash", "# comment", "a --b \\", "    --c  # note", "",
                      "d && e", "```", "```bash", "not marked", "```"])
    (block,) = marked_blocks(text, "doc.md")
    assert block == Block("doc.md", 3, ("a --b --c  # note", "d && e"))
    with pytest.raises(AssertionError, match="shell fence"):
        marked_blocks(f"{MARKER}\ntext\n", "doc.md")
    with pytest.raises(AssertionError, match="not closed"):
        marked_blocks(f"{MARKER}\n```bash\nls\n", "doc.md")


def _workspace(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder the commands may write into (plan.json, data/), with ``.venv`` linked to the
    interpreter's environment, and an environment whose ``python`` is the project's."""
    venv = REPO_ROOT / ".venv"
    if not (venv / "bin" / "python").exists():
        venv = Path(sys.prefix)
    (tmp_path / ".venv").symlink_to(venv, target_is_directory=True)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join((str(venv / "bin"), env.get("PATH", "")))
    # the same import roots as pytest's (pyproject.toml: pythonpath = functions, .)
    env["PYTHONPATH"] = os.pathsep.join((str(REPO_ROOT / "functions"), str(REPO_ROOT)))
    env.setdefault("MPLBACKEND", "Agg")
    return tmp_path, env


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_marked_commands_run_as_shown(block: Block, tmp_path: Path) -> None:
    cwd, env = _workspace(tmp_path)
    for command in block.commands:  # in order, in one folder: a later one may read an earlier's
        done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
                              check=False)
        assert done.returncode == 0, (
            f"{block.name}: `{command}` exited {done.returncode}\n"
            f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-2000:]}")
