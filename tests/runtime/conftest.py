"""Fixtures of the runtime suite.

* ``stub``: an AWS client of the test module's choosing (its own ``client`` fixture, built
  with :func:`offline_client`) under botocore's Stubber, which checks every request and
  response against the real service model;
* ``s3``: an in-memory S3 (moto) with the buckets :data:`DATASETS`, :data:`RESULTS` and
  :data:`EXCHANGE`, the ``FASDL_*`` environment of an S3 deployment naming them, and a client
  of it. A test module adds to it by overriding ``s3_env`` (more variables, e.g.
  :func:`deployed_env` of its plan), ``s3_objects`` (objects put before the test) and
  ``s3_over_http``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
import torch
from botocore.stub import Stubber
from moto import mock_aws
from moto.server import ThreadedMotoServer

from fasdl.contract.plan import Plan
from fasdl.contract.settings import Settings
from fasdl.exchange import stores

DATASETS, RESULTS, EXCHANGE = "datasets", "results", "exchange"
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
          "AWS_DEFAULT_REGION": "us-east-1", "FASDL_STACK": "unit", "FASDL_CHANNEL": "s3",
          "FASDL_DATASETS_BUCKET": DATASETS, "FASDL_RESULTS_BUCKET": RESULTS,
          "FASDL_EXCHANGE_BUCKET": EXCHANGE, "FASDL_EXCHANGE_PREFIX": "exchange/",
          "FASDL_RUNS_PREFIX": "runs/"}
# this machine's AWS settings, and a deployed plan unless the module sets one (deployed_env)
_UNSET = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "FASDL_PLAN",
          "FASDL_DEPLOYMENT")


def offline_client(service: str) -> Any:
    """A client that never reaches AWS: fixed region, dummy credentials."""
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="y")


@pytest.fixture
def deterministic_torch() -> Iterator[None]:
    """One thread and deterministic kernels: bitwise comparisons of trained state hold."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(threads)


@pytest.fixture
def stub(client: Any) -> Iterator[Stubber]:
    """The module's ``client`` stubbed; every queued response must be used."""
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def deployed_env(plan: Plan) -> dict[str, str]:
    """The variables of a stack deployed with ``plan`` (the trigger's FASDL_PLAN)."""
    return {"FASDL_DEPLOYMENT": plan.deployment_fingerprint(), "FASDL_PLAN": plan.to_json()}


@pytest.fixture
def s3_env() -> Mapping[str, str]:
    """Variables the test module adds to :data:`S3_ENV` (override it in the module)."""
    return {}


@pytest.fixture
def s3_objects() -> Mapping[tuple[str, str], bytes]:
    """``{(bucket, key): body}`` put before the test (override it in the module)."""
    return {}


@pytest.fixture
def s3_over_http() -> bool:
    """True: moto as a server, reached over HTTP as on AWS (``AWS_ENDPOINT_URL``); its
    in-process mock cannot take the bytearray bodies botocore sends for a worker's frames."""
    return False


@contextmanager
def _moto(over_http: bool) -> Iterator[str | None]:
    """moto for the duration; the server's endpoint, or None for the in-process mock."""
    if not over_http:
        with mock_aws():
            yield None
        return
    server = ThreadedMotoServer(port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, s3_env: Mapping[str, str],
       s3_objects: Mapping[tuple[str, str], bytes], s3_over_http: bool) -> Iterator[Any]:
    for name in _UNSET:
        monkeypatch.delenv(name, raising=False)
    for name, value in {**S3_ENV, **s3_env}.items():
        monkeypatch.setenv(name, value)
    with _moto(s3_over_http) as endpoint:
        if endpoint is not None:
            monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        client = stores.s3_client(Settings.from_env())
        for bucket in (DATASETS, RESULTS, EXCHANGE):
            client.create_bucket(Bucket=bucket)
        for (bucket, key), body in s3_objects.items():
            client.put_object(Bucket=bucket, Key=key, Body=body)
        yield client
