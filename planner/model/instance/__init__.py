"""The instance alternative: one EC2 instance for the same job, priced from measured throughput
(``options.py``: an offer and its run; ``shipped.py``: the offers planner/data/instances.json
ships)."""
