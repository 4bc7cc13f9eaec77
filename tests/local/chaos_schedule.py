"""The suite's chaos schedule (bench/chaos.py's seed and trial count), shared by the trials
that run it (test_chaos.py) and the checks of the schedule itself (test_chaos_faults.py)."""

from __future__ import annotations

# Seed 5 deals all thirteen kinds in five trials (test_chaos_faults.py checks it), and its
# trials include ones whose faults a retry must absorb (a killed worker, a duplicate, a
# zombie), so test_chaos.py can demand that at least one ends with the undisturbed run's
# weights.
SEED = 5
TRIALS = 5
