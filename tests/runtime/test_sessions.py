"""fasdl.aws.sessions: one boto3 Session per process and AWS settings, reused by warm
invocations, never across a settings change."""

from __future__ import annotations

import pytest

from fasdl.aws import sessions


@pytest.fixture()
def aws_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_REGION", raising=False)
    return monkeypatch


def test_warm_invocations_reuse_the_session(aws_env: pytest.MonkeyPatch) -> None:
    first = sessions.session()
    aws_env.setenv("AWS_LAMBDA_LOG_STREAM_NAME", "another")  # names the function, not AWS
    assert sessions.session() is first


def test_changed_credentials_get_a_session_of_their_own(aws_env: pytest.MonkeyPatch) -> None:
    first = sessions.session()
    aws_env.setenv("AWS_ACCESS_KEY_ID", "rotated")
    second = sessions.session()
    assert second is not first
    assert second.get_credentials().access_key == "rotated"


def test_clients_are_new_each_time_in_the_settings_region(aws_env: pytest.MonkeyPatch) -> None:
    one, two = sessions.client("s3"), sessions.client("s3")
    assert one is not two  # event hooks registered on one stay its own
    assert one.meta.region_name == "eu-west-1"
    assert sessions.client("s3", region="ap-south-1").meta.region_name == "ap-south-1"
    aws_env.delenv("AWS_DEFAULT_REGION")
    assert sessions.client("s3").meta.region_name == sessions.DEFAULT_REGION
