"""What the model is given: the problem (``problem.py``), the workload profile and its compute
prediction ``a·(B+b)/(M+m)`` (``profiles.py``, ``compute.py``), the platform profile
(``platform_profile.py``), prices and recipes, the profiles' provenance and their field
checks (``profile_fields.py``)."""
