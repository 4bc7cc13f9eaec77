"""Lambda account limits the stack (infra/compute.py), the trigger's start check
(fasdl.aws.account) and the planner's quotas (planner/search/quotas.py) agree on."""

from __future__ import annotations

EXECUTIONS_PER_WORKER = 2  # a worker and a retried segment's overlapping attempt

DEFAULT_ACCOUNT_CONCURRENCY = 1000  # Lambda's default "Concurrent executions" per Region

MIN_UNRESERVED_CONCURRENCY = 100  # PutFunctionConcurrency must leave this many unreserved

QUOTA_NAME = "Concurrent executions"

QUOTA_CODE = "L-B99A9384"  # Service Quotas code of QUOTA_NAME (service code "lambda")
