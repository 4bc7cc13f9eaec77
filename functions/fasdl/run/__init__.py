"""A run's life: run state and its transitions, fencing, checkpoints, the dataset check, the
segment runner a worker invocation executes, time budgets and results. The top layer of the
runtime; handlers call into it."""
