"""The profiler function's measurements: training steps per memory size and channel transfers,
written as the samples the planner fits."""
