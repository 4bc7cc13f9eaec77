"""Entry point: ``python -m planner plan|compare|frontier ...``."""

import sys

from planner.cli import main

sys.exit(main())
