"""Least-privilege IAM: one role per function, explicit statements scoped to prefixes.

Object actions are scoped to one key prefix of one stack-owned bucket. ``s3:ListBucket`` is
granted on the bucket (no wildcard) so a GET of a not-yet-written key answers 404 instead of
403: readers poll known keys with backoff and must tell "not yet" from "forbidden".
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fasdl.contract.settings import DEFAULT_PROFILES_PREFIX
from infra.storage import EXCHANGE_PREFIX, RUNS_PREFIX

PROFILES_PREFIX = DEFAULT_PROFILES_PREFIX
LAMBDA_PRINCIPAL = "lambda.amazonaws.com"

READ = ("s3:GetObject",)
READ_WRITE = ("s3:GetObject", "s3:PutObject")
READ_WRITE_DELETE = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")
CLEAN = ("s3:GetObject", "s3:DeleteObject")

# Actions that IAM only accepts with Resource "*" (no resource-level permissions), and why
# this stack needs each. tests/infra asserts no other action is granted on "*".
WILDCARD_RESOURCE_ACTIONS: dict[str, str] = {
    "ec2:CreateNetworkInterface": "Lambda in a VPC creates its ENIs (AWSLambdaVPCAccess)",
    "ec2:DescribeNetworkInterfaces": "Describe* has no resource-level permissions",
    "ec2:DeleteNetworkInterface": "Lambda in a VPC deletes its ENIs (AWSLambdaVPCAccess)",
    "ec2:AssignPrivateIpAddresses": "Lambda in a VPC manages its ENI addresses",
    "ec2:UnassignPrivateIpAddresses": "Lambda in a VPC manages its ENI addresses",
    "xray:PutTraceSegments": "X-Ray tracing of the state machine (SF2); no resource ARNs",
    "xray:PutTelemetryRecords": "X-Ray tracing of the state machine (SF2); no resource ARNs",
    "xray:GetSamplingRules": "X-Ray tracing of the state machine (SF2); no resource ARNs",
    "xray:GetSamplingTargets": "X-Ray tracing of the state machine (SF2); no resource ARNs",
    "logs:CreateLogDelivery": "Step Functions ALL logging (SF1): vended log delivery",
    "logs:GetLogDelivery": "Step Functions ALL logging (SF1): vended log delivery",
    "logs:UpdateLogDelivery": "Step Functions ALL logging (SF1): vended log delivery",
    "logs:DeleteLogDelivery": "Step Functions ALL logging (SF1): vended log delivery",
    "logs:ListLogDeliveries": "Step Functions ALL logging (SF1): vended log delivery",
    "logs:PutResourcePolicy": "Step Functions ALL logging (SF1): vended log delivery",
    "logs:DescribeResourcePolicies": "Step Functions ALL logging (SF1): vended log delivery",
    "logs:DescribeLogGroups": "Step Functions ALL logging (SF1): vended log delivery",
    "lambda:GetAccountSettings": "the trigger's concurrency check; an account-level read",
}

VPC_ENI_ACTIONS = [action for action in WILDCARD_RESOURCE_ACTIONS if action.startswith("ec2:")]
# The trigger's run-start checks (fasdl/aws/account.py). GetAccountSettings takes Resource "*" only;
# the others take the function's ARN, and InvokeFunction is for the one call that wakes an
# Inactive worker (lambda-api-permissions-ref.html).
TRIGGER_ACCOUNT_ACTIONS = [action for action in WILDCARD_RESOURCE_ACTIONS
                           if action.startswith("lambda:")]
TRIGGER_WORKER_ACTIONS = ["lambda:GetFunctionConfiguration", "lambda:GetFunctionConcurrency",
                          "lambda:InvokeFunction"]
# ElastiCache: the trigger finds the exchange cache's endpoint by name (resource-level: the
# serverlesscache ARN, Service Authorization Reference for ElastiCache).
DESCRIBE_SERVERLESS_CACHES = "elasticache:DescribeServerlessCaches"
# CloudWatch Logs: the trigger reads the workers' REPORT lines (resource-level: the log group)
FILTER_LOG_EVENTS = "logs:FilterLogEvents"


def build_role(scope: Construct, construct_id: str, description: str) -> iam.Role:
    """A role with no managed policies; callers add scoped statements."""
    return iam.Role(scope, construct_id, assumed_by=iam.ServicePrincipal(LAMBDA_PRINCIPAL),
                    description=description)


def allow_logs(role: iam.Role, group: logs.ILogGroup) -> None:
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["logs:CreateLogStream", "logs:PutLogEvents"],
        resources=[group.log_group_arn]))


def allow_vpc_enis(role: iam.Role) -> None:
    role.add_to_principal_policy(iam.PolicyStatement(actions=VPC_ENI_ACTIONS, resources=["*"]))


def allow_objects(role: iam.Role, bucket: s3.IBucket, prefix: str,
                  actions: tuple[str, ...]) -> None:
    """Object actions under ``prefix`` ('' = whole bucket) plus ListBucket for 404s."""
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=list(actions), resources=[bucket.arn_for_objects(f"{prefix}*")]))
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["s3:ListBucket"], resources=[bucket.bucket_arn]))


def grant_worker(role: iam.Role, *, datasets: s3.IBucket, results: s3.IBucket,
                 exchange: s3.IBucket | None) -> None:
    """``exchange`` is None for the Valkey channel: shards then never touch S3."""
    allow_objects(role, datasets, "", READ)
    allow_objects(role, results, RUNS_PREFIX, READ_WRITE_DELETE)  # checkpoints
    if exchange is not None:
        allow_objects(role, exchange, EXCHANGE_PREFIX, READ_WRITE_DELETE)


def grant_trigger(role: iam.Role, *, datasets: s3.IBucket, results: s3.IBucket,
                  exchange: s3.IBucket | None, worker: lambda_.IFunction,
                  worker_logs: logs.ILogGroup, cache_name: str | None = None) -> None:
    """Besides S3: the run-start checks of fasdl/aws/account.py, on the worker function only;
    the workers' REPORT lines (fasdl/aws/memory_report.py), in their log group only; and (Valkey
    plans) the lookup of the exchange cache's endpoint, on that cache only. ``exchange`` (S3
    plans): deleting a failed epoch's shards before its retry (fasdl.run.fencing)."""
    allow_objects(role, datasets, "", READ)
    allow_objects(role, results, RUNS_PREFIX, READ_WRITE)
    if exchange is not None:
        allow_objects(role, exchange, EXCHANGE_PREFIX, CLEAN)
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=TRIGGER_ACCOUNT_ACTIONS, resources=["*"]))
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=TRIGGER_WORKER_ACTIONS, resources=[worker.function_arn]))
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=[FILTER_LOG_EVENTS], resources=[worker_logs.log_group_arn]))
    if cache_name is not None:
        stack = Stack.of(role)
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=[DESCRIBE_SERVERLESS_CACHES],
            resources=[stack.format_arn(service="elasticache", resource="serverlesscache",
                                        resource_name=cache_name,
                                        arn_format=ArnFormat.COLON_RESOURCE_NAME)]))


def grant_finalize(role: iam.Role, *, results: s3.IBucket, exchange: s3.IBucket) -> None:
    allow_objects(role, results, RUNS_PREFIX, READ_WRITE_DELETE)
    allow_objects(role, exchange, EXCHANGE_PREFIX, CLEAN)


def grant_profiler(role: iam.Role, *, datasets: s3.IBucket, results: s3.IBucket,
                   exchange: s3.IBucket) -> None:
    allow_objects(role, datasets, "", READ)
    allow_objects(role, results, PROFILES_PREFIX, READ_WRITE)
    allow_objects(role, exchange, EXCHANGE_PREFIX, READ_WRITE_DELETE)


# the keys an adaptive run's re-plan creates once each (fasdl.contract.keys: adaptation_key,
# adapted_plan_key), under any run of the runs prefix
REPLAN_WRITTEN = ("*/adaptations/*", "*/plans/*")


def grant_replan(role: iam.Role, *, results: s3.IBucket) -> None:
    """Read the run's records; create its decisions and changed plans, nothing else."""
    allow_objects(role, results, RUNS_PREFIX, READ)
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["s3:PutObject"],
        resources=[results.arn_for_objects(f"{RUNS_PREFIX}{pattern}")
                   for pattern in REPLAN_WRITTEN]))
