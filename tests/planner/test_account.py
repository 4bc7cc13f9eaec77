"""``python -m planner account`` reads the account's Lambda limits and ``plan --account`` plans
within them and records them.

moto 5.2.5 answers STS GetCallerIdentity, but its Lambda GetAccountSettings is "Not yet
implemented" (HTTP 404) and its Service Quotas knows only the vpc service, so the Lambda and
Service Quotas sides are botocore's Stubber on real clients: the request and response shapes
are still checked against botocore's service model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from planner.commands import account as account_command
from planner.commands.cli import main
from planner.search.quotas import AccountLimits

REGION = "us-east-1"
MOTO_ACCOUNT = "123456789012"  # moto's default account id
PLAN = ["plan", "--workload", "mobilenet-cifar10", "--deadline", "3600",
        "--max-global-batch", "512", "--epochs", "1", "--min-workers", "2", "--json"]


def _settings(quota: int, unreserved: int) -> dict[str, Any]:
    return {"AccountLimit": {"TotalCodeSize": 80530636800, "CodeSizeUnzipped": 262144000,
                             "CodeSizeZipped": 52428800, "ConcurrentExecutions": quota,
                             "UnreservedConcurrentExecutions": unreserved},
            "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0}}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


# Service Quotas' answers: a memory quota among Lambda's (its name is not documented, nor its
# code: these are made up), none, or a refusal (an error code)
MEMORY_QUOTA = {"ServiceCode": "lambda", "QuotaCode": "L-00000000", "Value": 3008.0,
                "QuotaName": "Function memory maximum", "Unit": "None", "Adjustable": False,
                "GlobalQuota": False}
OTHER_QUOTA = {"ServiceCode": "lambda", "QuotaCode": "L-B99A9384", "Value": 10.0,
               "QuotaName": "Concurrent executions", "Unit": "None", "Adjustable": True,
               "GlobalQuota": False}


def _clients(lambda_reply: dict[str, Any] | str,
             quotas_reply: list[dict[str, Any]] | str = "AccessDeniedException"
             ) -> tuple[Any, Any, Any]:
    """moto's STS and stubbed Lambda and Service Quotas clients answering GetAccountSettings
    and ListServiceQuotas once (a str: that error code instead)."""
    sts = boto3.client("sts", region_name=REGION)
    lambda_client = boto3.client("lambda", region_name=REGION)
    stubber = Stubber(lambda_client)
    if isinstance(lambda_reply, str):
        stubber.add_client_error("get_account_settings", service_error_code=lambda_reply,
                                 service_message="User is not authorized", http_status_code=403)
    else:
        stubber.add_response("get_account_settings", lambda_reply, {})
    stubber.activate()
    quotas = boto3.client("service-quotas", region_name=REGION)
    quota_stubber = Stubber(quotas)
    if isinstance(quotas_reply, str):
        quota_stubber.add_client_error("list_service_quotas", service_error_code=quotas_reply,
                                       http_status_code=403)
    else:
        quota_stubber.add_response("list_service_quotas", {"Quotas": quotas_reply},
                                   {"ServiceCode": "lambda"})
    quota_stubber.activate()
    return sts, lambda_client, quotas


@pytest.mark.usefixtures("aws")
@pytest.mark.parametrize(("quota", "unreserved", "given", "quotas", "memory", "source", "note"), [
    # Service Quotas refuses: inferred, and said to be
    (10, 10, None, "AccessDeniedException", 3008, "heuristic-new-account",
     "inferred, a heuristic (Service Quotas refused servicequotas:ListServiceQuotas "
     "(AccessDeniedException))"),
    (1000, 900, None, [OTHER_QUOTA], 10240, "heuristic-lambda-maximum",
     "inferred, a heuristic (Service Quotas lists no Lambda memory quota for this account)"),
    # read: whatever the concurrency says
    (1000, 1000, None, [OTHER_QUOTA, MEMORY_QUOTA], 3008, "service-quotas",
     "Service Quotas' Lambda quota 'Function memory maximum' for this account"),
    (1000, 1000, 2048, [MEMORY_QUOTA], 2048, "given", "as --max-memory gave it"),
])
def test_read_limits(quota: int, unreserved: int, given: int | None,
                     quotas: list[dict[str, Any]] | str, memory: int, source: str,
                     note: str) -> None:
    clients = _clients(_settings(quota, unreserved), quotas)
    limits = account_command.read_limits(clients, REGION, max_memory_mb=given,
                                         today="2026-11-28")
    assert limits == AccountLimits(
        account_id=MOTO_ACCOUNT, region=REGION, max_memory_mb=memory,
        max_concurrency=unreserved, concurrent_executions=quota, memory_source=source,
        memory_note=limits.memory_note, read_on="2026-11-28")
    assert limits.memory_note.startswith(note)


def _account(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
              reply: dict[str, Any] | str, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(account_command, "aws_clients", lambda region, profile: _clients(reply))
    code = main(["account", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.usefixtures("aws")
def test_account_file_then_a_plan_within_it(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    out = tmp_path / "account.json"
    code, printed, _ = _account(capsys, monkeypatch, _settings(10, 10), "--region", REGION,
                                "--out", str(out))
    assert code == 0, printed
    written = json.loads(out.read_text())
    assert written["max_memory_mb"] == 3008
    assert written["memory_source"] == "heuristic-new-account"  # labelled in the file
    assert "up to 3,008 MB: inferred, a heuristic (Service Quotas refused" in printed
    assert "--max-memory 3008 --max-concurrency 10" in printed and "W <= 5" in printed
    # memory below what the plan would pick alone, and 10 concurrent executions: W <= 5
    data = {**json.loads(out.read_text()), "max_memory_mb": 1024}
    out.write_text(json.dumps(data))
    code = main([*PLAN, "--region", REGION, "--account", str(out)])
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert code == 0
    assert plan["deployment"]["memory_mb"] <= 1024 and plan["deployment"]["workers"] <= 5
    assert plan["quotas"] == {"max_concurrency": 10, "max_memory_mb": 1024,
                              "account_max_memory_mb": 1024, "account_max_concurrency": 10,
                              "account": f"{MOTO_ACCOUNT} {REGION} {data['read_on']}"}


@pytest.mark.parametrize(("region", "argv", "argument", "text"), [
    (REGION, ["--max-memory", "2048"], "--max-memory", "[128, 1024]"),  # only lowers it
    ("eu-west-1", [], "--account", "holds the limits of region eu-west-1"),
])
def test_plan_refuses_what_the_account_file_does_not_allow(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, region: str, argv: list[str],
        argument: str, text: str) -> None:
    path = tmp_path / "account.json"
    path.write_text(json.dumps(AccountLimits(
        account_id=MOTO_ACCOUNT, region=region, max_memory_mb=1024, max_concurrency=10,
        concurrent_executions=10, memory_source="given", memory_note="as --max-memory gave it",
        read_on="2026-11-28").to_dict()))
    code = main([*PLAN, "--region", REGION, "--account", str(path), *argv])
    error = json.loads(capsys.readouterr().out)
    assert code == 2 and error["argument"] == argument and text in error["message"]


def test_a_bad_account_file_names_its_field(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    path = tmp_path / "account.json"
    path.write_text(json.dumps({"account_id": MOTO_ACCOUNT, "region": REGION}))
    assert main([*PLAN, "--region", REGION, "--account", str(path)]) == 2
    message = json.loads(capsys.readouterr().out)["message"]
    assert f"account file {path}: field 'max_memory_mb': is missing" in message


@pytest.mark.usefixtures("aws")
def test_access_denied_names_the_permissions(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    out = tmp_path / "account.json"
    code, _, err = _account(capsys, monkeypatch, "AccessDeniedException", "--out", str(out))
    assert code == 2 and not out.exists()
    assert "argument --profile: GetAccountSettings was refused (AccessDeniedException)" in err
    assert "lambda:GetAccountSettings" in err


def test_missing_credentials_say_how_to_give_them(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """The real client, no credentials anywhere: botocore's NoCredentialsError, before any
    request leaves the machine (instance metadata off)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code = main(["account", "--out", str(tmp_path / "account.json"), "--json"])
    error = json.loads(capsys.readouterr().out)
    assert code == 2 and error["argument"] == "--profile"
    assert "NoCredentialsError" in error["message"] and "aws configure" in error["message"]
