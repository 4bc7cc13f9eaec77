"""checkov's CloudFormation checks on the synthesized templates of the test plans.

Every finding is fixed or acknowledged in infra/checkov.py (resource metadata
``checkov.skip``). checkov runs once, offline, over each template twice: as synthesized (no
finding may remain) and with the skips stripped (what each skip excuses), so a skip on a check
that passes anyway, or an acknowledgement no template uses, is an error too.

checkov pins boto3 to an older release than this project, so it lives in its own venv
(``make setup`` installs ``CHECKOV_VERSION`` from the Makefile into ``.venv-checkov``).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template

from infra.checkov import ACKNOWLEDGED, METADATA_KEY, add_skips
from infra.settings import REPO_ROOT
from tests.infra.conftest import Synth

CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
PIN = re.compile(r"^CHECKOV_VERSION\s*:=\s*(\S+)\s*$", re.MULTILINE)
# No API key, no platform metadata download (--skip-download too), no PyPI update check:
# nothing leaves the machine.
OFFLINE = {"CKV_SKIP_PACKAGE_UPDATE_CHECK": "true", "BC_SKIP_MAPPING": "TRUE"}
API_KEY_VARIABLES = ("BC_API_KEY",)  # --bc-api-key's variable
RAW = ".raw"
# What would invoke a function asynchronously, where a dead-letter queue would matter: S3,
# SNS or EventBridge need an invoke permission (resource policy), queues and streams a mapping.
ASYNC_SOURCES = ("AWS::Lambda::Permission", "AWS::Lambda::EventSourceMapping",
                 "AWS::Lambda::EventInvokeConfig")


@dataclass(frozen=True, order=True)
class Finding:
    template: str
    check: str
    resource: str  # logical id
    name: str = ""

    def __str__(self) -> str:
        return f"{self.template}: {self.check} on {self.resource} ({self.name})"


@dataclass(frozen=True)
class Scan:
    version: str
    failed: list[Finding]  # as synthesized: must be empty
    raw: set[tuple[str, str, str]]  # (template, check, resource) with the skips stripped
    skips: list[tuple[str, str, dict[str, Any]]]  # (template, resource, skip entry)


def _strip_skips(template: dict[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(template)
    for resource in raw["Resources"].values():
        resource.get("Metadata", {}).pop(METADATA_KEY, None)
    return raw


def _run_checkov(paths: list[Path]) -> dict[str, Any]:
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing: run `make setup` (it installs the pinned checkov)")
    result = subprocess.run(
        [str(CHECKOV), "--framework", "cloudformation", "--skip-download", "--quiet",
         "--output", "json", "--file", *map(str, paths)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**{key: value for key, value in os.environ.items()
                if key not in API_KEY_VARIABLES}, **OFFLINE},
        cwd=paths[0].parent)
    assert result.returncode in (0, 1), result.stderr[-4000:]  # 1: some check failed
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    (cloudformation,) = [r for r in reports if r.get("check_type") == "cloudformation"]
    found: dict[str, Any] = cloudformation
    return found


def _finding(check: dict[str, Any]) -> Finding:
    name = Path(check["file_path"]).name.removesuffix(".template.json")
    return Finding(name, check["check_id"], check["resource"].split(".", 1)[1],
                   check["check_name"])


def _templates(synths: dict[str, Synth]) -> list[tuple[str, dict[str, Any]]]:
    """Every synthesized stack: the training stacks and the Valkey plan's cache stack."""
    found = [(name, synth.json) for name, synth in synths.items()]
    return found + [(f"{name}_cache", synth.cache.json) for name, synth in synths.items()
                    if synth.cache is not None]


@pytest.fixture(scope="module")
def scan(synths: dict[str, Synth], tmp_path_factory: pytest.TempPathFactory) -> Scan:
    folder = tmp_path_factory.mktemp("checkov")
    paths, skips = [], []
    for name, stack_json in _templates(synths):
        for suffix, template in (("", stack_json), (RAW, _strip_skips(stack_json))):
            path = folder / f"{name}{suffix}.template.json"
            path.write_text(json.dumps(template, indent=1))
            paths.append(path)
        for logical, resource in stack_json["Resources"].items():
            for skip in resource.get("Metadata", {}).get(METADATA_KEY, {}).get("skip", []):
                skips.append((name, logical, skip))
    report = _run_checkov(paths)
    findings = [_finding(check) for check in report["results"].get("failed_checks", [])]
    return Scan(
        version=report["summary"]["checkov_version"],
        failed=sorted(f for f in findings if not f.template.endswith(RAW)),
        raw={(f.template.removesuffix(RAW), f.check, f.resource)
             for f in findings if f.template.endswith(RAW)},
        skips=skips)


def test_checkov_is_the_pinned_version(scan: Scan) -> None:
    match = PIN.search((REPO_ROOT / "Makefile").read_text())
    assert match, "the Makefile pins CHECKOV_VERSION"
    assert scan.version == match.group(1), "stale .venv-checkov: run `make setup`"


def test_no_unacknowledged_findings(scan: Scan) -> None:
    assert not scan.failed, ("fix each, or acknowledge it in infra/checkov.py with its reason:\n"
                             + "\n".join(map(str, scan.failed)))


def test_checkov_ran_and_skips_were_read(scan: Scan) -> None:
    assert scan.raw, "checkov reported nothing on the raw templates: did it run at all?"
    assert scan.skips


def test_every_skip_excuses_a_failing_check(scan: Scan) -> None:
    """A skip on a check the resource passes hides nothing but would hide a regression."""
    needless = [f"{template}: {skip['id']} on {logical}"
                for template, logical, skip in scan.skips
                if (template, skip["id"], logical) not in scan.raw]
    assert not needless, "skips on checks that pass: narrow them\n" + "\n".join(needless)


def test_every_acknowledgement_is_used(scan: Scan) -> None:
    used = {(skip["id"], skip["comment"]) for template, logical, skip in scan.skips
            if (template, skip["id"], logical) in scan.raw}
    stale = [f"{entry.check} {entry.kind} {entry.path}" for entry in ACKNOWLEDGED
             if (entry.check, entry.reason) not in used]
    assert not stale, "acknowledgements no template needs: remove them\n" + "\n".join(stale)


def test_every_skip_has_a_reason(scan: Scan) -> None:
    for template, logical, skip in scan.skips:
        assert str(skip.get("comment", "")).strip(), f"{template}: {skip} on {logical}"
    keys = [(entry.check, entry.kind, entry.path) for entry in ACKNOWLEDGED]
    assert len(keys) == len(set(keys))
    for entry in ACKNOWLEDGED:
        assert re.fullmatch(r"CKV2?_AWS_\d+", entry.check), entry
        assert len(entry.reason) >= 80, entry.check  # sentences, not a placeholder


def test_functions_are_only_invoked_synchronously(synths: dict[str, Synth]) -> None:
    """The premise of the FasDL functions' dead-letter-queue acknowledgement: no event source,
    no invoke permission for a service, no Event task (CloudFormation's asynchronous call of
    CDK's auto-delete handler has an acknowledgement of its own)."""
    for name, synth in synths.items():
        for kind in ASYNC_SOURCES:
            assert synth.resources(kind) == {}, f"{name}: {kind}"
        for machine in synth.resources("AWS::StepFunctions::StateMachine").values():
            definition = machine["Properties"]["DefinitionString"]
            parts = definition["Fn::Join"][1] if isinstance(definition, dict) else [definition]
            text = "".join(part for part in parts if isinstance(part, str))
            assert '"InvocationType":"Event"' not in text, name


def test_skips_merge_into_existing_metadata() -> None:
    """Metadata written by others (and skips listed by hand) survive add_skips."""
    stack = cdk.Stack(cdk.App(), "MergeStack")
    group = logs.CfnLogGroup(stack, "Logs")
    group.add_metadata("owner", "someone")
    group.add_metadata(METADATA_KEY, {"skip": [{"id": "CKV_AWS_66", "comment": "by hand"}],
                                      "note": "kept"})
    add_skips(stack)
    (resource,) = Template.from_stack(stack).to_json()["Resources"].values()
    metadata = resource["Metadata"]
    assert metadata["owner"] == "someone" and metadata[METADATA_KEY]["note"] == "kept"
    assert [skip["id"] for skip in metadata[METADATA_KEY]["skip"]] == [
        "CKV_AWS_66", "CKV_AWS_158"]
