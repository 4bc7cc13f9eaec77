"""Entry point: ``python -m planner plan|compare|frontier ...``."""

import sys

from planner.commands.cli import main

sys.exit(main())
