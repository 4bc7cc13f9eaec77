"""Where a local run's objects live: the stack's three bucket variables bound to the local S3
server's fixed bucket names, and the runtime's own key layout (fasdl.contract.settings.Settings,
fasdl.contract.keys) at its default prefixes, which the local template leaves as deployed."""

from __future__ import annotations

from fasdl.contract.settings import Settings

BUCKETS = {"FASDL_DATASETS_BUCKET": "fasdl-datasets", "FASDL_RESULTS_BUCKET": "fasdl-results",
           "FASDL_EXCHANGE_BUCKET": "fasdl-exchange"}
LAYOUT = Settings(stack="local", channel="s3", deployment="",
                  datasets_bucket=BUCKETS["FASDL_DATASETS_BUCKET"],
                  results_bucket=BUCKETS["FASDL_RESULTS_BUCKET"],
                  exchange_bucket=BUCKETS["FASDL_EXCHANGE_BUCKET"])
