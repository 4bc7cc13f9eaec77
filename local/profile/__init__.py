"""``python -m local profile``: the synthesized profiler per memory, through the emulator,
fitted into planner profiles. Starts its servers as the run does (local.run.run_servers)."""
