"""Suite-wide settings. Area fixtures live in each folder's own conftest.py."""

import os

# The cost marks (servers, synth, sandbox, network, e2e): applied from tests/costs.py's table
# and enforced while each test runs.
pytest_plugins = ("tests.cost_marks",)

# jsii on Node 20 prints an end-of-life banner on every start; keep CI output readable.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("CDK_DISABLE_VERSION_CHECK", "1")
os.environ.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")
