"""Lambda account limits the stack (infra/compute.py), the trigger's start check
(fasdl.aws.account) and the planner's quotas (planner/search/quotas.py) agree on."""

from __future__ import annotations

EXECUTIONS_PER_WORKER = 2  # a worker and a retried segment's overlapping attempt

DEFAULT_ACCOUNT_CONCURRENCY = 1000  # Lambda's default "Concurrent executions" per Region

MIN_UNRESERVED_CONCURRENCY = 100  # PutFunctionConcurrency must leave this many unreserved

QUOTA_NAME = "Concurrent executions"

QUOTA_CODE = "L-B99A9384"  # Service Quotas code of QUOTA_NAME (service code "lambda")

# What `python -m planner account` read (planner/account.py), recorded in a plan's provenance
# by `planner plan --account`; the synth refuses a plan whose memory is above the recorded
# limit (infra/settings.py), since Lambda would refuse to create its functions.
ACCOUNT_MEMORY_KEY = "account_max_memory_mb"
ACCOUNT_CONCURRENCY_KEY = "account_max_concurrency"
ACCOUNT_KEY = "account"  # "<account id> <region> <date read>"

# The function-memory limit accounts on the reduced new-account quotas have met:
# CreateFunction answers "'MemorySize' value failed to satisfy constraint: Member must have
# value less than or equal to 3008". AWS documents only that new accounts have "reduced
# concurrency and memory quotas" (gettingstarted-limits.html), not the number.
NEW_ACCOUNT_MEMORY_MB = 3008
