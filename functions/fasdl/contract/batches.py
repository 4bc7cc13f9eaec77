"""Batch arithmetic of a K-REDUCE run: the global batch and each worker's share of the data.

Pure Python: the plan contract (fasdl.contract.plan) and the planner use it.
"""

from __future__ import annotations


def global_batch(workers: int, aggregators: int, batch_aggregator: int,
                 batch_non_aggregator: int) -> int:
    """B^g = K·B^a + (W−K)·B^n  (FasDL Eq. 6)."""
    return aggregators * batch_aggregator + (workers - aggregators) * batch_non_aggregator


def partition_sizes(samples: int, workers: int, aggregators: int, batch_aggregator: int,
                    batch_non_aggregator: int) -> list[int]:
    """Samples per worker, proportional to its batch (thesis Eq. 4-3/4-4, corrected).

    Aggregators get D^a = floor(D·B^a/B^g); the non-aggregators share the rest as evenly as
    possible, so the sizes always sum to D and every worker holds at least
    floor(D/B^g)·B_i samples, enough for the epoch's iterations.
    """
    batch = global_batch(workers, aggregators, batch_aggregator, batch_non_aggregator)
    per_aggregator = samples * batch_aggregator // batch
    sizes = [per_aggregator] * aggregators
    rest = samples - per_aggregator * aggregators
    receivers = workers - aggregators
    if receivers == 0:  # ScatterReduce: spread the remainder over the aggregators
        for index in range(rest):
            sizes[index % workers] += 1
        return sizes
    base, extra = divmod(rest, receivers)
    return sizes + [base + (1 if index < extra else 0) for index in range(receivers)]
