"""cdk-nag (v2 API) wiring and the stack's acknowledged findings, each with its reason.

``add_suppressions`` only attaches metadata; checks run where :func:`add_checks` is called
(tests/infra, or ``cdk synth -c nag=true``). cdk-nag is a dev dependency, so both are no-ops
when it is not installed.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aspects, Stack
from constructs import IConstruct

# (rule, reason, applies_to regexes or None): the complete list of acknowledged findings.
ACKNOWLEDGED: list[tuple[str, str, list[str] | None]] = [
    ("AwsSolutions-L1",
     "The runtime is pinned on purpose (infra/lambda_runtime.py): the torch layer is built "
     "and ELF-scanned for exactly this CPython ABI and Amazon Linux 2023's glibc.", None),
    ("AwsSolutions-IAM5",
     "Object-level S3 actions need a key pattern; each is scoped to one FasDL prefix "
     "(runs/, exchange/, profiles/) or the datasets of a bucket this stack owns.",
     [r"/^Resource::<[A-Za-z0-9]+Bucket[A-Za-z0-9]+\.Arn>\/([a-z]+\/)?\*$/"]),
    ("AwsSolutions-IAM5",
     "An adaptive run's re-plan function creates only its decisions and the plans it changes "
     "to, under any run of the runs prefix (runs/<run>/adaptations/, runs/<run>/plans/); "
     "run ids are known only at run time (infra/replan.py).",
     [r"/^Resource::<[A-Za-z0-9]+Bucket[A-Za-z0-9]+\.Arn>\/runs\/\*\/(adaptations|plans)\/\*$/"]),
    ("AwsSolutions-IAM5",
     "Only actions without resource-level permissions are granted on '*': Lambda VPC ENI "
     "management, X-Ray tracing (SF2), vended log delivery (SF1) and the trigger's "
     "lambda:GetAccountSettings; the list and a test guarding it are "
     "infra.access.WILDCARD_RESOURCE_ACTIONS.", ["Resource::*"]),
    ("AwsSolutions-IAM5",
     "Step Functions invokes the functions by ARN; CDK also grants the ':*' qualifier form "
     "so versions and aliases of the same functions stay invocable.",
     [r"/^Resource::<[A-Za-z0-9]+\.Arn>:\*$/"]),
    ("AwsSolutions-IAM5",
     "A Distributed Map starts, describes and stops child executions of this state machine; "
     "execution ARNs are only known at run time.",
     [r"/^Resource::arn:.*:states:.*:execution:.*\*$/"]),
]


def _rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for rule, reason, applies in ACKNOWLEDGED:
        entry: dict[str, Any] = {"id": rule, "reason": reason}
        if applies:
            entry["applies_to"] = [{"regex": pattern} if pattern.startswith("/") else pattern
                                   for pattern in applies]
        rules.append(entry)
    return rules


def add_suppressions(stack: Stack) -> None:
    try:
        from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
    except ImportError:  # production synth without dev extras: nothing checks, nothing to say
        return
    suppressions = []
    for entry in _rules():
        applies = entry.get("applies_to")
        suppressions.append(NagPackSuppression(
            id=entry["id"], reason=entry["reason"],
            applies_to=None if applies is None else [
                RegexAppliesTo(regex=item["regex"]) if isinstance(item, dict) else item
                for item in applies]))
    NagSuppressions.add_stack_suppressions(stack, suppressions)


def add_checks(scope: IConstruct, *, log_ignores: bool = False) -> bool:
    """Attach AwsSolutionsChecks; returns False when cdk-nag is not installed.

    ``log_ignores`` also reports each acknowledged finding (as info), which lets tests prove
    the checks ran and the acknowledgements matched something.
    """
    try:
        from cdk_nag import AwsSolutionsChecks
    except ImportError:
        return False
    Aspects.of(scope).add(AwsSolutionsChecks(verbose=True, log_ignores=log_ignores))
    return True
