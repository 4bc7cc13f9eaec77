"""FasDL's performance and cost model: the problem (``problem.py``), per-role memory, exchange
time and requests, the pipelined exchange, segments, and the profiles and recipes it reads."""
