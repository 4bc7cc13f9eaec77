"""Fixtures for the infra suite: each template is synthesized ONCE per session.

jsii synth costs seconds per stack, so the three reference stacks (S3 + x86_64 small W,
Valkey + arm64, W > 40 Distributed Map) are session-scoped and shared by the snapshot,
assertion, nag and lint tests. Every stack uses the committed stand-in torch layer so the
result does not depend on whether ``make layer`` ran.

Snapshots: after an intended infra change, review and refresh them with
``.venv/bin/python -m pytest tests/infra --snapshot-update``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Template

from infra.nag import add_checks
from infra.settings import REPO_ROOT, STUB_TORCH_LAYER, SynthSettings, load_settings
from infra.stack import FasdlStack, build_stacks

PLANS = Path(__file__).parent / "plans"
PLAN_FILES = {
    "s3_x86_small": REPO_ROOT / "infra" / "default_plan.json",
    "valkey_arm64": PLANS / "valkey_arm64.json",
    "wide_s3": PLANS / "wide_s3.json",
}


@dataclass
class StackTemplate:
    """One synthesized stack: the construct, its assertions template and its JSON."""

    stack: Stack
    template: Template
    json: dict[str, Any]

    @classmethod
    def of(cls, stack: Stack) -> StackTemplate:
        template = Template.from_stack(stack)
        return cls(stack, template, dict(template.to_json()))

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {key: value for key, value in self.json["Resources"].items()
                if value["Type"] == kind}


@dataclass
class Synth:
    name: str
    settings: SynthSettings
    stack: FasdlStack
    template: Template
    json: dict[str, Any]
    cache: StackTemplate | None  # FasdlCacheStack, Valkey plans only

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {key: value for key, value in self.json["Resources"].items()
                if value["Type"] == kind}


def cdk_context() -> dict[str, Any]:
    """Feature flags from cdk.json, so tests build what `cdk synth` builds."""
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return context


def synthesize(name: str, plan: Path, app_context: dict[str, str] | None = None,
               **context: str) -> Synth:
    settings = load_settings({"plan": str(plan), "torch_layer": str(STUB_TORCH_LAYER),
                              **context}, warn=False)
    app = cdk.App(context={**cdk_context(), **(app_context or {})})
    stack, cache_stack = build_stacks(app, settings)
    for each in (stack, cache_stack):
        if each is not None:
            add_checks(each, log_ignores=True)  # nag runs during the same synthesis
    main = StackTemplate.of(stack)
    cache = StackTemplate.of(cache_stack) if cache_stack is not None else None
    return Synth(name, settings, stack, main.template, main.json, cache)


# The profiling state machine is opt-in: on (default memories) for the small S3 stack, on
# with a short list for the Valkey one, off for the wide one.
PROFILING_CONTEXT: dict[str, dict[str, str]] = {
    "s3_x86_small": {"profiling": "true"},
    "valkey_arm64": {"profile_memories": "1024,3008"},
    "wide_s3": {},
}


@pytest.fixture(scope="session")
def synths() -> dict[str, Synth]:
    return {name: synthesize(name, path, PROFILING_CONTEXT[name])
            for name, path in PLAN_FILES.items()}


@pytest.fixture(scope="session", params=list(PLAN_FILES))
def synth(request: pytest.FixtureRequest, synths: dict[str, Synth]) -> Synth:
    return synths[request.param]


@pytest.fixture(scope="session")
def s3_synth(synths: dict[str, Synth]) -> Synth:
    return synths["s3_x86_small"]


@pytest.fixture(scope="session")
def valkey_synth(synths: dict[str, Synth]) -> Synth:
    return synths["valkey_arm64"]


@pytest.fixture(scope="session")
def wide_synth(synths: dict[str, Synth]) -> Synth:
    return synths["wide_s3"]


@pytest.fixture(scope="session")
def small_distributed() -> Synth:
    """W = 4 taking the Distributed Map path (``-c inline_map_max_workers=2``), as the local
    end-to-end tests run it."""
    return synthesize("small_distributed", PLAN_FILES["s3_x86_small"],
                      inline_map_max_workers="2")


def state_machine_definition(synth: Synth, construct: str = "Workflow") -> dict[str, Any]:
    """The ASL of the training machine (``construct="Profiling"``: the profiling machine), with
    every CloudFormation token replaced by a fake but well-formed ARN."""
    (machine,) = [resource for logical, resource
                  in synth.resources("AWS::StepFunctions::StateMachine").items()
                  if logical.startswith(construct)]
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    text = "".join(part if isinstance(part, str) else _fake_arn(part) for part in parts)
    definition: dict[str, Any] = json.loads(text)
    return definition


def is_distributed_map(train: dict[str, Any]) -> bool:
    """Whether the ASL of the ``Train segment`` state is a Distributed Map."""
    return bool(train["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED")


def function_props(synth: Synth, handler: str) -> dict[str, Any]:
    """The Properties of the stack's Lambda function with this handler."""
    for function in synth.resources("AWS::Lambda::Function").values():
        if function["Properties"].get("Handler") == handler:
            props: dict[str, Any] = function["Properties"]
            return props
    raise AssertionError(f"no function with handler {handler}")


def ref_of(resources: dict[str, dict[str, Any]], value: Any) -> str:
    """Logical id behind a Ref or GetAtt."""
    if isinstance(value, dict) and "Ref" in value:
        return str(value["Ref"])
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return str(value["Fn::GetAtt"][0])
    raise AssertionError(f"not a reference: {value!r}")


def _fake_arn(token: dict[str, Any]) -> str:
    if token.get("Ref") == "AWS::Partition":
        return "aws"
    if token.get("Ref") == "AWS::AccountId":
        return "123456789012"
    logical = token.get("Fn::GetAtt", ["Function"])[0]
    return f"arn:aws:lambda:us-east-1:123456789012:function:{logical}"
