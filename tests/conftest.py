"""Suite-wide settings. Area fixtures live in each folder's own conftest.py."""

import os
import shutil
import tempfile

import pytest

# The cost marks (servers, synth, sandbox, network, e2e): applied from tests/costs.py's table
# and enforced while each test runs.
pytest_plugins = ("tests.cost_marks", "tests.file_order")

# jsii on Node 20 prints an end-of-life banner on every start; keep CI output readable.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("CDK_DISABLE_VERSION_CHECK", "1")
os.environ.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")

_OWN_SYNTH_CACHE = "_FASDL_SUITE_SYNTH_CACHE"  # set when this session made the folder


def pytest_configure(config: pytest.Config) -> None:
    """One synth per distinct plan for the whole session (local.aws.template's cache): the folder is
    made by the controller before xdist starts its workers, which inherit the variable, and by
    the local runs' subprocesses in turn."""
    from local.aws.template import SYNTH_CACHE_ENV

    if "PYTEST_XDIST_WORKER" in os.environ or SYNTH_CACHE_ENV in os.environ:
        return
    os.environ[SYNTH_CACHE_ENV] = tempfile.mkdtemp(prefix="fasdl-synth-cache-")
    os.environ[_OWN_SYNTH_CACHE] = os.environ[SYNTH_CACHE_ENV]


def pytest_unconfigure(config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ and (own := os.environ.pop(_OWN_SYNTH_CACHE, "")):
        shutil.rmtree(own, ignore_errors=True)
