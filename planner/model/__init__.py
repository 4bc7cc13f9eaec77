"""FasDL's performance and cost model, in rooms that import only downwards (pyproject.toml's
import contracts):

- ``confidence.py``: the prediction's range from the fits' residuals;
- ``terms/``: a Lambda run's time and cost, one module per term, ``terms/cost_model.py``
  assembling an iteration from its stages and a run from its segments; the stores' costs
  behind one protocol (``terms/channels.py``);
- ``instance/``: the alternative of one EC2 instance for the same job;
- ``inputs/``: what the model is given: the problem, the workload and platform profiles and
  prices, recipes, and the compute prediction every fit and search calls
  (``inputs/compute.py``)."""
