"""Buckets: datasets, results (plans, checkpoints, models), exchange (K-REDUCE shards), logs.

Every bucket enforces TLS, S3-managed encryption and blocks public access; all but the log
bucket send server access logs to the log bucket. Removal policies are deliberate: datasets and
results outlive the stack (RETAIN); the exchange bucket holds only shards, every object of it
expires within a day, so it is DESTROY with CDK's auto-delete custom resource, which empties it
during ``cdk destroy`` (CloudFormation cannot delete a bucket that still holds objects). Datasets
and results are also versioned: an overwritten or deleted object stays recoverable, results for a
day (the trigger prunes old checkpoints, and a pruned version is billed until it expires),
datasets for a month. The periods are fasdl.contract.storage_lifecycle's, which the planner prices
(planner/model/terms/storage_cost.py). Why the exchange and log buckets are not versioned:
infra/checkov.py. Lifecycle rules: https://docs.aws.amazon.com/AmazonS3/latest/userguide/intro-lifecycle-rules.html
"""

from __future__ import annotations

from aws_cdk import CfnResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fasdl.contract.settings import DEFAULT_EXCHANGE_PREFIX, DEFAULT_RUNS_PREFIX
from fasdl.contract.storage_lifecycle import (
    DATASETS_NONCURRENT_DAYS,
    EXCHANGE_EXPIRY_DAYS,
    MULTIPART_ABORT_DAYS,
    RESULTS_NONCURRENT_DAYS,
)

EXCHANGE_PREFIX = DEFAULT_EXCHANGE_PREFIX  # the runtime's key layout (fasdl.contract.settings)
RUNS_PREFIX = DEFAULT_RUNS_PREFIX
# The whole exchange bucket, not only EXCHANGE_PREFIX: whatever the key layout, no shard lives
EXCHANGE_EXPIRY = Duration.days(EXCHANGE_EXPIRY_DAYS)
MULTIPART_ABORT = Duration.days(MULTIPART_ABORT_DAYS)
ACCESS_LOG_EXPIRY = Duration.days(365)
# Workers poll the exchange prefix with GETs many times per second: a year of those records
# would be the bulk of the log bucket. A week still covers the post-mortem of a run (the only
# per-request record of 503 SlowDown and turn-around times on the exchange), and since logs
# arrive within hours, nothing older is needed.
EXCHANGE_ACCESS_LOG_EXPIRY = Duration.days(7)
# Versioned buckets: how long a replaced or deleted object stays recoverable (and billed)
RESULTS_NONCURRENT_EXPIRY = Duration.days(RESULTS_NONCURRENT_DAYS)
DATASETS_NONCURRENT_EXPIRY = Duration.days(DATASETS_NONCURRENT_DAYS)

DATASETS_LOG_PREFIX = "datasets/"
RESULTS_LOG_PREFIX = "results/"
EXCHANGE_LOG_PREFIX = "exchange/"

LOG_BUCKET_ID = "AccessLogsBucket"
DATASETS_BUCKET_ID = "DatasetsBucket"
RESULTS_BUCKET_ID = "ResultsBucket"
EXCHANGE_BUCKET_ID = "ExchangeBucket"
AUTO_DELETE_LOGS_ID = "AutoDeleteObjectsLogs"
# The stack-level singleton behind `auto_delete_objects` (aws-cdk-lib's own construct ids).
AUTO_DELETE_PROVIDER_ID = "Custom::S3AutoDeleteObjectsCustomResourceProvider"
AUTO_DELETE_LOG_RETENTION = logs.RetentionDays.ONE_MONTH


def _versioned_lifecycle(noncurrent_expiry: Duration) -> s3.LifecycleRule:
    """Failed multipart uploads, replaced versions and then their delete markers go away."""
    return s3.LifecycleRule(abort_incomplete_multipart_upload_after=MULTIPART_ABORT,
                            noncurrent_version_expiration=noncurrent_expiry,
                            expired_object_delete_marker=True)


class Storage(Construct):
    """The four buckets of a FasDL stack."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.log_bucket = self._build_log_bucket()
        self.datasets = self._build_datasets_bucket()
        self.results = self._build_results_bucket()
        self.exchange = self._build_exchange_bucket()
        self._tidy_auto_delete_provider()

    def _bucket(self, construct_id: str, *, removal: RemovalPolicy,
                lifecycle: list[s3.LifecycleRule], log_prefix: str | None,
                auto_delete: bool = False, versioned: bool = False) -> s3.Bucket:
        return s3.Bucket(
            self, construct_id,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=removal,
            auto_delete_objects=auto_delete,
            versioned=versioned,
            lifecycle_rules=lifecycle,
            server_access_logs_bucket=self.log_bucket if log_prefix else None,
            server_access_logs_prefix=log_prefix,
        )

    def _build_log_bucket(self) -> s3.Bucket:
        # Audit trail: kept after the stack is deleted, expired after a year; the exchange's
        # polling records after a week (S3 honours the shorter of two overlapping expirations).
        return s3.Bucket(
            self, LOG_BUCKET_ID,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(expiration=ACCESS_LOG_EXPIRY),
                s3.LifecycleRule(prefix=EXCHANGE_LOG_PREFIX,
                                 expiration=EXCHANGE_ACCESS_LOG_EXPIRY)],
        )

    def _build_datasets_bucket(self) -> s3.Bucket:
        # User data uploaded once and reused across runs: never deleted with the stack.
        return self._bucket(DATASETS_BUCKET_ID, removal=RemovalPolicy.RETAIN,
                            lifecycle=[_versioned_lifecycle(DATASETS_NONCURRENT_EXPIRY)],
                            log_prefix=DATASETS_LOG_PREFIX, versioned=True)

    def _build_results_bucket(self) -> s3.Bucket:
        # Trained models and checkpoints are the product of paid compute: RETAIN.
        return self._bucket(RESULTS_BUCKET_ID, removal=RemovalPolicy.RETAIN,
                            lifecycle=[_versioned_lifecycle(RESULTS_NONCURRENT_EXPIRY)],
                            log_prefix=RESULTS_LOG_PREFIX, versioned=True)

    def _build_exchange_bucket(self) -> s3.Bucket:
        # Shards are garbage after their iteration; the lifecycle is the backstop for the
        # runtime's own deletes and for crashed runs, auto-delete empties it on `cdk destroy`.
        return self._bucket(EXCHANGE_BUCKET_ID, removal=RemovalPolicy.DESTROY,
                            lifecycle=[s3.LifecycleRule(
                                expiration=EXCHANGE_EXPIRY,
                                abort_incomplete_multipart_upload_after=MULTIPART_ABORT)],
                            log_prefix=EXCHANGE_LOG_PREFIX, auto_delete=True)

    def _tidy_auto_delete_provider(self) -> None:
        """Hold CDK's auto-delete function to this stack's rules: its own log group, which
        expires and goes with the stack (Lambda's default group would outlive it, never
        expiring), and one explicit log statement instead of AWSLambdaBasicExecutionRole."""
        provider = Stack.of(self).node.try_find_child(AUTO_DELETE_PROVIDER_ID)
        handler = provider.node.try_find_child("Handler") if provider else None
        role = provider.node.try_find_child("Role") if provider else None
        if not isinstance(handler, CfnResource) or not isinstance(role, CfnResource):
            raise RuntimeError(f"aws-cdk-lib no longer builds {AUTO_DELETE_PROVIDER_ID}/Handler "
                               "and /Role: revisit Storage._tidy_auto_delete_provider")
        group = logs.LogGroup(self, AUTO_DELETE_LOGS_ID, retention=AUTO_DELETE_LOG_RETENTION,
                              removal_policy=RemovalPolicy.DESTROY)
        handler.add_property_override("LoggingConfig", {"LogGroup": group.log_group_name})
        role.add_property_deletion_override("ManagedPolicyArns")
        role.add_property_override("Policies", [{
            "PolicyName": "WriteOwnLogGroup",
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": group.log_group_arn}]}}])
