"""The re-plan function of an adaptive run (issue 42): the planner's decision step at a
segment boundary, over the run's records in the results bucket."""
