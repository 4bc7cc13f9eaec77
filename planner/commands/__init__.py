"""The planner's commands, behind ``python -m planner`` (``cli.py``, the one parser): ``plan``,
``compare``, ``frontier`` and ``fit`` with their inputs (``cli_inputs.py``), reports
(``report.py``, ``verdict.py``: Lambda or one instance, in plain words) and the plan file they
write (``planfile.py``); ``workload new`` (``workload_new.py``), ``fit`` (``fit_command.py``),
``account`` (``account.py``) and ``calibrate`` (``calibrate.py``)."""
