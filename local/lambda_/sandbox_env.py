"""Variables the emulator sets for a sandbox process, read there before anything heavy is
imported (local/lambda_/invoke.py is the sandbox's entry point)."""

from __future__ import annotations

SHAPING_ENV = "FASDL_LOCAL_SHAPING"  # set by the emulator: see local/lambda_/lambda_speed.py
