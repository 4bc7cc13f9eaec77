"""Write a benchmark's table into README.md between its markers, so `make bench` keeps the
Results section true. Markers: ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


class MarkerMissing(RuntimeError):
    """README.md lacks the markers of a benchmark section."""


def update_section(name: str, markdown: str, readme: Path = README) -> None:
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = readme.read_text()
    if begin not in text or end not in text:
        raise MarkerMissing(f"{readme}: add the lines {begin} and {end} where the {name} "
                            "results belong")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(f"{head}{begin}\n{markdown.strip()}\n{end}{tail}")
