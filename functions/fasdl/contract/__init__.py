"""The contracts every part agrees on: the plan, the events between the state machine and the
handlers, every storage key, the ``FASDL_*`` settings, the cache's names, the error names the
state machine matches, and field checking. Stdlib only; imports nothing else of fasdl, so infra
and the planner can import it without torch."""
