"""Adaptive runs (issue 42): what a run measured, refitted; the rest re-planned."""
