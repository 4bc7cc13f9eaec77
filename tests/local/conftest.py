"""Fixtures for local/: the default plan synthesized ONCE with the real CLI (npx cdk synth), and
a real channel (SeaweedFS S3 or Valkey) with the shipped platform profile of its kind."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fasdl.exchange.channel.base import Channel
from fasdl.exchange.channel.factory import build_channel
from infra.settings import DEFAULT_PLAN_PATH
from local.aws.template import LocalTemplate, load_template, synthesize
from local.servers.managed import SeaweedS3Server, ValkeyServer
from planner.model.inputs.profiles import PlatformProfile, load_platform

STUBS = Path(__file__).parent / "stubs"


@pytest.fixture(scope="session")
def default_template(tmp_path_factory: pytest.TempPathFactory) -> LocalTemplate:
    if shutil.which("npx") is None:
        pytest.fail("npx not found: tests/local need node (make setup)")
    outdir = tmp_path_factory.mktemp("cdk-out")
    return load_template(synthesize(DEFAULT_PLAN_PATH, outdir), region="us-east-1")


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedS3Server]:
    with SeaweedS3Server(buckets=("fasdl-emulation",)) as server:
        yield server


@pytest.fixture(scope="module")
def valkey() -> Iterator[ValkeyServer]:
    with ValkeyServer() as server:
        yield server


@pytest.fixture(params=["s3", "valkey"])
def real(request: pytest.FixtureRequest) -> Iterator[tuple[Channel, PlatformProfile]]:
    if request.param == "s3":
        server: SeaweedS3Server = request.getfixturevalue("seaweed")
        channel = build_channel(server.channel_config(prefix="shape/"), session=server.session())
    else:
        store: ValkeyServer = request.getfixturevalue("valkey")
        channel = build_channel(store.channel_config(prefix="shape/"))
    yield channel, load_platform(request.param)
    channel.delete_prefix("")
    channel.close()


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A stub run's folder with its empty call log (tests.local.stub_workflow)."""
    (tmp_path / "calls.jsonl").touch()
    yield tmp_path
