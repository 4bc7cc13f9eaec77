"""Write a benchmark's table into docs/results.md between its markers, so `make bench` keeps
the results true. Markers: ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``. (The module
kept its name from when the tables were in README.md.)"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS_DOC = Path(__file__).resolve().parent.parent / "docs" / "results.md"


class MarkerMissing(RuntimeError):
    """The results document lacks the markers of a benchmark section."""


def update_section(name: str, markdown: str, doc: Path = RESULTS_DOC) -> None:
    """Replace what stands between the markers of ``name`` in ``doc`` with ``markdown``."""
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = doc.read_text()
    if begin not in text or end not in text:
        raise MarkerMissing(f"{doc}: add the lines {begin} and {end} where the {name} "
                            "results belong")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{markdown.strip()}\n{end}{tail}")


def image(alt: str, path: Path, doc: Path = RESULTS_DOC) -> str:
    """A Markdown image of ``path`` (a file under ``doc``'s folder), linked relative to ``doc``."""
    return f"![{alt}]({path.resolve().relative_to(doc.resolve().parent).as_posix()})"


def predicted_vs_measured(axis: Any, labels: Sequence[str], predicted: Sequence[float],
                          measured: Sequence[float], *, measured_label: str = "measured",
                          rotation: int = 0) -> None:
    """Side-by-side bars of predicted and measured epoch times on a matplotlib axis."""
    positions = range(len(labels))
    axis.bar([p - 0.2 for p in positions], predicted, 0.4, label="predicted (planner)")
    axis.bar([p + 0.2 for p in positions], measured, 0.4, label=measured_label)
    axis.set_xticks(list(positions), labels, rotation=rotation,
                    ha="right" if rotation else "center", fontsize=8)
    axis.set_ylabel("epoch time (s)")
    axis.legend(fontsize=8)
