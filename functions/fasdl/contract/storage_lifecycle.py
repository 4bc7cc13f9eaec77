"""How long the stack's buckets keep what a run leaves behind: the stack's S3 lifecycle rules
(infra/storage.py) and the planner's storage pricing (planner/model/terms/storage_cost.py) read the
same periods, so a plan's predicted storage is the one the rules enforce.

S3 counts a noncurrent version's days from when it became noncurrent, and an expiration takes
effect at the next midnight UTC after the day count (it is queued then; S3 stops billing storage
from the expiration date on): "How Amazon S3 calculates when an object became noncurrent",
https://docs.aws.amazon.com/AmazonS3/latest/userguide/intro-lifecycle-rules.html#non-current-days-calculations
and https://aws.amazon.com/s3/faqs/ ("You will not be billed for storage for objects on or after
their expiration date"). Lifecycle day counts are whole days, at least one. Stdlib only.
"""

from __future__ import annotations

SECONDS_PER_DAY = 86_400
# The results bucket is versioned, and the trigger prunes every checkpoint but the newest
# FASDL_KEEP_CHECKPOINTS (fasdl.run.retention): a pruned checkpoint stays as a noncurrent
# version, billed, until this expiration. One day keeps a run's deleted checkpoints (the bulk of
# its storage) short and still recovers a mistaken delete of a model the next morning.
RESULTS_NONCURRENT_DAYS = 1
# Datasets are the user's: a replaced or deleted one stays recoverable for a month.
DATASETS_NONCURRENT_DAYS = 30
# The exchange bucket: shards the runtime did not delete (a crashed run, a dead epoch).
EXCHANGE_EXPIRY_DAYS = 1
MULTIPART_ABORT_DAYS = 1
# What the planner prices of the results a run keeps (its newest checkpoints and the model):
# one month after the run. They are not expired (they are the product); delete them when done.
RESULTS_PRICED_DAYS = 30


def billed_noncurrent_s(noncurrent_days: int) -> float:
    """Seconds a version deleted at some moment stays billed, at most: its noncurrent days and
    the wait for the next midnight UTC."""
    return float((noncurrent_days + 1) * SECONDS_PER_DAY)
