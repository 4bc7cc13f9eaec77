"""cdk-nag AwsSolutions: zero unacknowledged findings; every acknowledgement has a reason."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk.assertions import Annotations, Match

from infra.nag import ACKNOWLEDGED
from tests.infra.conftest import Synth

NAG_FINDING = Match.string_like_regexp(r"AwsSolutions-.*")


def _stacks(synth: Synth) -> list[Stack]:
    """The training stack and, for Valkey plans, its cache stack: nag checks both."""
    return [synth.stack] + ([synth.cache.stack] if synth.cache is not None else [])


def test_no_unacknowledged_errors(synth: Synth) -> None:
    for stack in _stacks(synth):
        errors = Annotations.from_stack(stack).find_error("*", NAG_FINDING)
        assert [f"{e.id}: {e.entry.data}" for e in errors] == []


def test_no_unacknowledged_warnings(synth: Synth) -> None:
    for stack in _stacks(synth):
        warnings = Annotations.from_stack(stack).find_warning("*", NAG_FINDING)
        assert [f"{w.id}: {w.entry.data}" for w in warnings] == []


def test_acknowledgements_are_explained() -> None:
    assert ACKNOWLEDGED
    for rule, reason, applies_to in ACKNOWLEDGED:
        assert rule.startswith("AwsSolutions-")
        assert len(reason) >= 40, rule  # a sentence, not a placeholder
        if rule == "AwsSolutions-IAM5":
            assert applies_to, "IAM5 must name the wildcard it accepts"


def test_suppressions_are_in_the_template(synth: Synth) -> None:
    metadata = synth.json["Metadata"]["cdk_nag"]["rules_to_suppress"]
    assert {entry["id"] for entry in metadata} == {rule for rule, _, _ in ACKNOWLEDGED}


def test_checks_ran_and_acknowledgements_matched(synths: dict[str, Synth]) -> None:
    """Suppressed findings are logged as info: proof that nag ran and each entry is used."""
    matched: set[str] = set()
    for synth in synths.values():
        for info in Annotations.from_stack(synth.stack).find_info("*", NAG_FINDING):
            matched.add(str(info.entry.data))
    text = "\n".join(matched)
    for rule, reason, _ in ACKNOWLEDGED:
        assert rule in text
        assert reason[:30] in text, f"acknowledgement never used: {reason[:60]}"
