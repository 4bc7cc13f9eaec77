"""A Lambda run's time and cost, term by term: per-role memory, exchange time by stage (phased
and pipelined, the client's CPU), exchange and segment requests, storage, the stores' rate
limits, each store's costs behind one protocol (``channels.py``), and ``cost_model.py``, which
assembles an iteration from its stages and a run from its segments."""
