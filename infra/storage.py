"""Buckets: datasets, results (plans, checkpoints, models), exchange (K-REDUCE shards), logs.

Every bucket enforces TLS, S3-managed encryption and blocks public access; all but the log
bucket send server access logs to the log bucket. Removal policies are deliberate: datasets and
results outlive the stack (RETAIN), the exchange bucket holds only shards that expire within a
day (DESTROY; a delete right after a run fails until the lifecycle empties it).
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

EXCHANGE_PREFIX = "exchange/"
RUNS_PREFIX = "runs/"
EXCHANGE_EXPIRY = Duration.days(1)
MULTIPART_ABORT = Duration.days(1)
ACCESS_LOG_EXPIRY = Duration.days(365)

LOG_BUCKET_ID = "AccessLogsBucket"
DATASETS_BUCKET_ID = "DatasetsBucket"
RESULTS_BUCKET_ID = "ResultsBucket"
EXCHANGE_BUCKET_ID = "ExchangeBucket"


class Storage(Construct):
    """The four buckets of a FasDL stack."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.log_bucket = self._build_log_bucket()
        self.datasets = self._build_datasets_bucket()
        self.results = self._build_results_bucket()
        self.exchange = self._build_exchange_bucket()

    def _bucket(self, construct_id: str, *, removal: RemovalPolicy,
                lifecycle: list[s3.LifecycleRule], log_prefix: str | None) -> s3.Bucket:
        return s3.Bucket(
            self, construct_id,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=removal,
            lifecycle_rules=lifecycle,
            server_access_logs_bucket=self.log_bucket if log_prefix else None,
            server_access_logs_prefix=log_prefix,
        )

    def _build_log_bucket(self) -> s3.Bucket:
        # Audit trail: kept after the stack is deleted, expired after a year.
        return s3.Bucket(
            self, LOG_BUCKET_ID,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[s3.LifecycleRule(expiration=ACCESS_LOG_EXPIRY)],
        )

    def _build_datasets_bucket(self) -> s3.Bucket:
        # User data uploaded once and reused across runs: never deleted with the stack.
        return self._bucket(DATASETS_BUCKET_ID, removal=RemovalPolicy.RETAIN,
                            lifecycle=[s3.LifecycleRule(
                                abort_incomplete_multipart_upload_after=MULTIPART_ABORT)],
                            log_prefix="datasets/")

    def _build_results_bucket(self) -> s3.Bucket:
        # Trained models and checkpoints are the product of paid compute: RETAIN.
        return self._bucket(RESULTS_BUCKET_ID, removal=RemovalPolicy.RETAIN,
                            lifecycle=[s3.LifecycleRule(
                                abort_incomplete_multipart_upload_after=MULTIPART_ABORT)],
                            log_prefix="results/")

    def _build_exchange_bucket(self) -> s3.Bucket:
        # Shards are garbage after their iteration; the lifecycle is the backstop for the
        # runtime's own deletes and for crashed runs.
        return self._bucket(EXCHANGE_BUCKET_ID, removal=RemovalPolicy.DESTROY,
                            lifecycle=[s3.LifecycleRule(
                                prefix=EXCHANGE_PREFIX, expiration=EXCHANGE_EXPIRY,
                                abort_incomplete_multipart_upload_after=MULTIPART_ABORT)],
                            log_prefix="exchange/")
