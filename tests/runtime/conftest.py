"""Fixtures of the runtime suite: an AWS client of the test module's choosing (its own
``client`` fixture, built with :func:`offline_client`) under botocore's Stubber, which checks
every request and response against the real service model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber


def offline_client(service: str) -> Any:
    """A client that never reaches AWS: fixed region, dummy credentials."""
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="y")


@pytest.fixture
def stub(client: Any) -> Iterator[Stubber]:
    """The module's ``client`` stubbed; every queued response must be used."""
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()
