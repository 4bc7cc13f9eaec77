"""checkov's acknowledged findings on the synthesized template, each with its reason.

checkov (a second IaC scanner, next to cdk-nag; run by tests/infra/test_checkov.py) skips a
check on a CloudFormation resource whose ``Metadata.checkov.skip`` lists
``{"id": "CKV_AWS_xx", "comment": reason}``. :func:`add_skips` writes those entries from
:data:`ACKNOWLEDGED` at synthesis, merged into the metadata a resource already has. Each entry
names one check, one resource type, a construct-path pattern and, where the finding depends on
the resource's configuration, a predicate, so a skip lands only where the check fails and
disappears once the property it excuses is set (the test rejects a skip on a passing check).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsii
from aws_cdk import Aspects, CfnResource, IAspect, Stack
from constructs import IConstruct

from infra.access import VPC_ENI_ACTIONS
from infra.storage import (
    AUTO_DELETE_PROVIDER_ID,
    EXCHANGE_BUCKET_ID,
    LOG_BUCKET_ID,
)

METADATA_KEY = "checkov"
Predicate = Callable[[CfnResource], bool]


@dataclass(frozen=True)
class Acknowledgement:
    """One accepted checkov finding: where it applies and why it is accepted."""

    check: str  # CKV_AWS_xx
    kind: str  # CloudFormation resource type
    path: str  # regex, full match on the construct path below the stack
    reason: str
    applies: Predicate | None = None  # further condition on the resource itself


def _unset(attribute: str) -> Predicate:
    """Only where the L1 property is not set (CDK's own untyped CfnResources have none)."""
    return lambda resource: getattr(resource, attribute, None) is None


def _only_vpc_eni_wildcards(resource: CfnResource) -> bool:
    """A policy granting the Lambda VPC ENI actions on '*', and nothing else on '*'."""
    document = Stack.of(resource).resolve(getattr(resource, "policy_document", None)) or {}
    wildcard: list[str] = []
    for statement in document.get("Statement", []):
        resources = statement.get("Resource")
        if resources == "*" or resources == ["*"]:
            actions = statement.get("Action", [])
            wildcard.extend([actions] if isinstance(actions, str) else actions)
    return bool(wildcard) and set(wildcard) <= set(VPC_ENI_ACTIONS)


FUNCTION = "AWS::Lambda::Function"
# the four FasDL functions and an adaptive plan's re-plan function (infra/replan.py)
COMPUTE_FUNCTIONS = r"(Compute/[A-Za-z0-9]+|Replan/Replan)/Resource"
# aws-cdk-lib's singleton that empties the exchange bucket (auto_delete_objects).
AUTO_DELETE_HANDLER = re.escape(f"{AUTO_DELETE_PROVIDER_ID}/Handler")

ACKNOWLEDGED: tuple[Acknowledgement, ...] = (
    Acknowledgement(
        "CKV_AWS_158", "AWS::Logs::LogGroup", r".+",
        "CloudWatch Logs always encrypts log data at rest (AES-256-GCM under service keys). "
        "A customer managed key would add a key policy on top of IAM at $1/month per key, "
        "billed while the stack sits idle; these groups hold handler logs, EMF metrics, "
        "execution input/output and VPC flow records, no credentials or user data.",
        _unset("kms_key_id")),
    Acknowledgement(
        "CKV_AWS_173", FUNCTION, COMPUTE_FUNCTIONS,
        "Lambda always encrypts environment variables at rest with the AWS managed key "
        "aws/lambda. They hold resource names, key prefixes, the plan and the cache "
        "endpoint, no credentials (the functions authenticate with their role), so a "
        "customer managed key would protect nothing secret.",
        _unset("kms_key_arn")),
    Acknowledgement(
        "CKV_AWS_116", FUNCTION, COMPUTE_FUNCTIONS,
        "Every FasDL function is invoked synchronously (RequestResponse: the Step Functions "
        "tasks name the function ARN), and the state machines handle failures with their "
        "Retry and Catch rules. A dead-letter queue only receives failed asynchronous "
        "invocations, so it would never get a message.",
        _unset("dead_letter_config")),
    Acknowledgement(
        "CKV_AWS_116", FUNCTION, AUTO_DELETE_HANDLER,
        "aws-cdk-lib's handler that empties the exchange bucket on cdk destroy. CloudFormation "
        "invokes it asynchronously; the handler catches its own errors and reports them to "
        "CloudFormation, which fails the stack operation with that reason (rerun cdk destroy), "
        "and the error stays in Storage/AutoDeleteObjectsLogs. A queue would hold events "
        "nothing replays."),
    Acknowledgement(
        "CKV_AWS_115", FUNCTION, COMPUTE_FUNCTIONS,
        "Reserved concurrency both caps a function and withholds that many executions from "
        "the account's other functions for as long as it exists, idle or not. Trigger, "
        "finalize, re-plan and profilers run one invocation per execution step or memory; the "
        "workers' "
        "2W fit the pool because the planner keeps W within --max-concurrency / 2, and "
        "infra/settings.py's reserve_concurrency is the opt-in for reserving them.",
        _unset("reserved_concurrent_executions")),
    Acknowledgement(
        "CKV_AWS_115", FUNCTION, AUTO_DELETE_HANDLER,
        "aws-cdk-lib's auto-delete handler runs only when CloudFormation creates, updates or "
        "deletes the exchange bucket's custom resource, one invocation at a time; reserving "
        "executions for it would withhold them from the account for nothing."),
    Acknowledgement(
        "CKV_AWS_117", FUNCTION, COMPUTE_FUNCTIONS,
        "Only functions that reach the Valkey cache need a VPC, and in Valkey plans they are "
        "in it (infra/network.py). The others, and every function of an S3 plan (which has no "
        "VPC), call only AWS service APIs, over TLS and signed with their role: a VPC would "
        "add ENI setup without isolating anything they reach.",
        _unset("vpc_config")),
    Acknowledgement(
        "CKV_AWS_117", FUNCTION, AUTO_DELETE_HANDLER,
        "aws-cdk-lib's auto-delete handler calls only the S3 API for the exchange bucket; "
        "there is no resource in a VPC for it to reach."),
    Acknowledgement(
        "CKV_AWS_111", "AWS::IAM::Policy",
        r"Compute/[A-Za-z0-9]+Role/DefaultPolicy/Resource",  # VPC functions: the predicate
        "The only writes on '*' are the ENI actions Lambda needs to attach a VPC function "
        "(infra/access.VPC_ENI_ACTIONS), granted on '*' as AWS's managed "
        "AWSLambdaVPCAccessExecutionRole does: Lambda picks the interfaces at run time and "
        "DescribeNetworkInterfaces has no resource-level permissions. The role is assumable "
        "by Lambda alone; every S3 write is scoped to a prefix of a stack-owned bucket.",
        _only_vpc_eni_wildcards),
    Acknowledgement(
        "CKV_AWS_21", "AWS::S3::Bucket", f"Storage/{EXCHANGE_BUCKET_ID}/Resource",
        "Shards are written once, read by peers and deleted within their iteration (leftovers "
        "expire after a day). Versioning would keep every deleted shard, W+1 model copies per "
        "iteration, as a noncurrent version and turn each delete into a delete marker: cost "
        "with nothing worth recovering.",
        _unset("versioning_configuration")),
    Acknowledgement(
        "CKV_AWS_21", "AWS::S3::Bucket", f"Storage/{LOG_BUCKET_ID}/Resource",
        "S3's logging service writes each access-log object once under a unique key; nothing "
        "overwrites them and lifecycle expires them. No role of this stack can write or delete "
        "here (delivery goes through the bucket policy), so versioning would only keep expired "
        "logs around.",
        _unset("versioning_configuration")),
    Acknowledgement(
        "CKV_AWS_18", "AWS::S3::Bucket", f"Storage/{LOG_BUCKET_ID}/Resource",
        "This bucket is the access-log destination of the other three. AWS advises against a "
        "bucket logging into itself (each delivery would be logged in turn, without end), and "
        "a further log bucket would only move this finding there.",
        _unset("logging_configuration")),
)


def _matches(entry: Acknowledgement, resource: CfnResource, path: str) -> bool:
    if resource.cfn_resource_type != entry.kind or not re.fullmatch(entry.path, path):
        return False
    return entry.applies is None or entry.applies(resource)


def skips_for(resource: CfnResource, path: str) -> list[dict[str, str]]:
    """checkov skip entries for one resource (``path``: construct path below the stack)."""
    return [{"id": entry.check, "comment": entry.reason}
            for entry in ACKNOWLEDGED if _matches(entry, resource, path)]


@jsii.implements(IAspect)
class _Skips:
    """Writes the skips at synthesis, when every resource of the stack exists."""

    def __init__(self, stack: Stack) -> None:
        self._prefix = f"{stack.node.path}/"

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, CfnResource) or not node.node.path.startswith(self._prefix):
            return
        skips = skips_for(node, node.node.path[len(self._prefix):])
        if not skips:
            return
        existing: dict[str, Any] = dict(node.get_metadata(METADATA_KEY) or {})
        listed = list(existing.get("skip", []))
        known = {item.get("id") for item in listed}
        listed.extend(skip for skip in skips if skip["id"] not in known)
        node.add_metadata(METADATA_KEY, {**existing, "skip": listed})


def add_skips(stack: Stack) -> None:
    """Acknowledge :data:`ACKNOWLEDGED` on the matching resources of ``stack``."""
    Aspects.of(stack).add(_Skips(stack))
