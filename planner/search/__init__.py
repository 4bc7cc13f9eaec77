"""Searches over the model: exact branch and bound (bounds from the model's own terms), the
thesis's two-stage heuristic, the exhaustive reference, baselines and account quotas."""
