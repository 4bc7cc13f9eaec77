"""``python -m local run``: its options, the prepared plan and data, the servers it starts, the
run itself, its limits, its report and the single-process reference."""
