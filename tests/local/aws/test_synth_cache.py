"""``$FASDL_SYNTH_CACHE``: the suite's runs synthesize the same few plans again and again, so
local.aws.template keeps one synth per distinct input (plan bytes, context, stack name) and copies
it. The CLI itself is replaced by a recorder here: what is tested is the keying and the copy; every
end-to-end test synthesizes through this path with the real CLI."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from local.aws import template

MACHINE = {"Resources": {"M": {"Type": "AWS::StepFunctions::StateMachine"}}}


@pytest.fixture
def synths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """Each real synth the cache asks for, recorded by its outdir."""
    made: list[Path] = []

    def fake(plan_path: Path, outdir: Path, *, stack_name: str | None,
             context: Mapping[str, str] | None) -> Path:
        outdir.mkdir(parents=True)
        made.append(outdir)
        path = outdir / "Fasdl.template.json"
        path.write_text(json.dumps({**MACHINE, "plan": Path(plan_path).read_text(),
                                    "context": dict(context or {})}))
        return path

    monkeypatch.setattr(template, "_synthesize", fake)
    monkeypatch.setenv(template.SYNTH_CACHE_ENV, str(tmp_path / "cache"))
    return made


def test_the_same_inputs_are_synthesized_once_and_copied(synths: list[Path],
                                                         tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"a": 1}')
    first = template.synthesize(plan, tmp_path / "one")
    second = template.synthesize(plan, tmp_path / "two")
    assert len(synths) == 1
    assert first.parent == tmp_path / "one" and second.parent == tmp_path / "two"
    assert first.read_text() == second.read_text()


def test_other_plan_bytes_or_context_are_a_new_synth(synths: list[Path], tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"a": 1}')
    template.synthesize(plan, tmp_path / "one")
    template.synthesize(plan, tmp_path / "two", context={"profiling": "true"})
    template.synthesize(plan, tmp_path / "three", stack_name="Other")
    plan.write_text('{"a": 2}')
    changed = template.synthesize(plan, tmp_path / "four")
    assert len(synths) == 4
    assert json.loads(changed.read_text())["plan"] == '{"a": 2}'


def test_a_synth_that_failed_is_not_kept(synths: list[Path], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"a": 1}')
    recorder = template._synthesize

    def failing(plan_path: Path, outdir: Path, *, stack_name: str | None,
                context: Mapping[str, str] | None) -> Path:
        outdir.mkdir(parents=True)
        raise template.TemplateError("cdk synth failed (exit 1)")

    monkeypatch.setattr(template, "_synthesize", failing)
    with pytest.raises(template.TemplateError):
        template.synthesize(plan, tmp_path / "one")
    monkeypatch.setattr(template, "_synthesize", recorder)
    template.synthesize(plan, tmp_path / "two")
    assert len(synths) == 1  # synthesized again, not the failed attempt's leftovers


def test_without_the_variable_every_call_synthesizes(synths: list[Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(template.SYNTH_CACHE_ENV)
    plan = tmp_path / "plan.json"
    plan.write_text('{"a": 1}')
    template.synthesize(plan, tmp_path / "one")
    template.synthesize(plan, tmp_path / "two")
    assert synths == [tmp_path / "one", tmp_path / "two"]
