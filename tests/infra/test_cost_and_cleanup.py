"""What a stack leaves behind: `cdk destroy` empties the exchange bucket, its polling logs
expire within a week, the failed-execution alarm mails `-c alarm_email` through an encrypted
topic (and costs nothing without it), and the README's idle cost of the cache matches the
shipped prices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match

from infra.settings import REPO_ROOT, SynthSettingsError, load_settings
from infra.storage import EXCHANGE_LOG_PREFIX
from tests.infra.conftest import PLAN_FILES, Synth, synthesize

ALARM_EMAIL = "you@example.com"
NAG_FINDING = Match.string_like_regexp(r"AwsSolutions-.*")
CLOUDWATCH = {"Service": "cloudwatch.amazonaws.com"}
PRICES = REPO_ROOT / "planner" / "data" / "prices" / "us-east-1.json"
HOURS_PER_MONTH = 730  # AWS pricing's month


@pytest.fixture(scope="module")
def email_synth() -> Synth:
    return synthesize("s3_x86_small_email", PLAN_FILES["s3_x86_small"],
                      alarm_email=ALARM_EMAIL)


def _bucket(synth: Synth, prefix: str) -> tuple[str, dict[str, Any]]:
    (found,) = [(key, value) for key, value in synth.resources("AWS::S3::Bucket").items()
                if key.startswith(f"Storage{prefix}")]
    return found


def _only(synth: Synth, kind: str) -> dict[str, Any]:
    (resource,) = synth.resources(kind).values()
    return resource


# ---- exchange bucket: emptied by `cdk destroy` -----------------------------------------
def test_exchange_bucket_is_emptied_and_deleted_with_the_stack(synth: Synth) -> None:
    exchange_id, exchange = _bucket(synth, "ExchangeBucket")
    assert exchange["DeletionPolicy"] == "Delete"
    (auto_delete,) = synth.resources("Custom::S3AutoDeleteObjects").values()
    assert auto_delete["Properties"]["BucketName"] == {"Ref": exchange_id}
    assert auto_delete["DeletionPolicy"] == "Delete"
    for kept in ("DatasetsBucket", "ResultsBucket", "AccessLogsBucket"):
        assert _bucket(synth, kept)[1]["DeletionPolicy"] == "Retain", kept


def test_auto_delete_function_logs_to_its_own_expiring_group(synth: Synth) -> None:
    """CDK's provider is held to the stack's rules: no managed policy, a log group that
    expires and is deleted with the stack, writable by that function alone."""
    (handler,) = [value for key, value in synth.resources("AWS::Lambda::Function").items()
                  if key.startswith("CustomS3AutoDeleteObjectsCustomResourceProviderHandler")]
    group_id = handler["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    group = synth.json["Resources"][group_id]
    assert group["DeletionPolicy"] == "Delete" and group["Properties"]["RetentionInDays"] == 30
    role = synth.json["Resources"][handler["Properties"]["Role"]["Fn::GetAtt"][0]]["Properties"]
    assert "ManagedPolicyArns" not in role
    (policy,) = role["Policies"]
    assert policy["PolicyDocument"]["Statement"] == [{
        "Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
        "Resource": {"Fn::GetAtt": [group_id, "Arn"]}}]


# ---- access logs: a week for the exchange's polling, a year for the rest ----------------
def test_exchange_access_logs_expire_after_a_week(synth: Synth) -> None:
    log_id, log_bucket = _bucket(synth, "AccessLogsBucket")
    rules = log_bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    by_prefix = {rule.get("Prefix"): rule["ExpirationInDays"] for rule in rules}
    assert by_prefix == {None: 365, EXCHANGE_LOG_PREFIX: 7}
    logging = _bucket(synth, "ExchangeBucket")[1]["Properties"]["LoggingConfiguration"]
    assert logging == {"DestinationBucketName": {"Ref": log_id},
                       "LogFilePrefix": EXCHANGE_LOG_PREFIX}


def test_datasets_and_results_keep_their_access_logs(synth: Synth) -> None:
    log_id, _ = _bucket(synth, "AccessLogsBucket")
    for name, prefix in (("DatasetsBucket", "datasets/"), ("ResultsBucket", "results/")):
        logging = _bucket(synth, name)[1]["Properties"]["LoggingConfiguration"]
        assert logging == {"DestinationBucketName": {"Ref": log_id}, "LogFilePrefix": prefix}


# ---- alarm notifications ---------------------------------------------------------------
def test_without_alarm_email_nothing_is_subscribed_or_billed(synth: Synth) -> None:
    for kind in ("AWS::SNS::Topic", "AWS::SNS::Subscription", "AWS::KMS::Key"):
        assert synth.resources(kind) == {}, kind
    assert "AlarmActions" not in _only(synth, "AWS::CloudWatch::Alarm")["Properties"]


def test_alarm_email_is_subscribed_to_the_alarm(email_synth: Synth) -> None:
    (topic_id,) = email_synth.resources("AWS::SNS::Topic")
    subscription = _only(email_synth, "AWS::SNS::Subscription")["Properties"]
    assert subscription == {"Endpoint": ALARM_EMAIL, "Protocol": "email",
                            "TopicArn": {"Ref": topic_id}}
    alarm = _only(email_synth, "AWS::CloudWatch::Alarm")["Properties"]
    assert alarm["AlarmActions"] == [{"Ref": topic_id}]


def test_alarm_topic_is_encrypted_tls_only_and_publishable_by_the_alarm(
        email_synth: Synth) -> None:
    topic = _only(email_synth, "AWS::SNS::Topic")["Properties"]
    (key_id,) = email_synth.resources("AWS::KMS::Key")
    # A customer managed key: CloudWatch cannot publish under alias/aws/sns.
    assert topic["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    statements = _only(email_synth, "AWS::SNS::TopicPolicy")["Properties"][
        "PolicyDocument"]["Statement"]
    assert any(s["Effect"] == "Deny" and s["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}} for s in statements)
    (alarm_id,) = email_synth.resources("AWS::CloudWatch::Alarm")
    (publish,) = [s for s in statements if s["Effect"] == "Allow"]
    assert publish["Principal"] == CLOUDWATCH and publish["Action"] == "sns:Publish"
    assert publish["Condition"] == {
        "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [alarm_id, "Arn"]}}}


def test_alarm_topic_key_is_rotated_scoped_and_deleted_with_the_stack(
        email_synth: Synth) -> None:
    key = _only(email_synth, "AWS::KMS::Key")
    assert key["DeletionPolicy"] == "Delete"
    props = key["Properties"]
    assert props["EnableKeyRotation"] is True and props["PendingWindowInDays"] == 7
    (grant,) = [s for s in props["KeyPolicy"]["Statement"] if s.get("Principal") == CLOUDWATCH]
    assert sorted(grant["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    topic_name = _only(email_synth, "AWS::SNS::Topic")["Properties"]["TopicName"]
    arn = grant["Condition"]["StringEquals"]["kms:EncryptionContext:aws:sns:topicArn"]
    assert arn["Fn::Join"][1][-1] == f":{topic_name}"


@pytest.mark.parametrize("bad", ["not-an-email", "you@example", "you @example.com",
                                 "you@example.com,me@example.com", "@example.com", "you@.",
                                 "true"])
def test_bad_alarm_email_is_a_settings_error(bad: str) -> None:
    with pytest.raises(SynthSettingsError, match=r"'alarm_email'.*you@example\.com"):
        load_settings({"alarm_email": bad}, warn=False)


def test_alarm_email_is_optional() -> None:
    assert load_settings({}, warn=False).alarm_email is None
    assert load_settings({"alarm_email": ""}, warn=False).alarm_email is None
    assert load_settings({"alarm_email": f" {ALARM_EMAIL} "},
                         warn=False).alarm_email == ALARM_EMAIL


def test_app_reads_alarm_email_from_context(tmp_path: Path) -> None:
    """`-c alarm_email=...` reaches the settings: a bad one stops synth before any resource."""
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"alarm_email": "nobody"}),
           "CDK_OUTDIR": str(tmp_path / "out"),
           "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    result = subprocess.run([sys.executable, str(REPO_ROOT / "app.py")], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120, check=False, env=env)
    assert result.returncode == 2, result.stderr
    assert "'alarm_email'" in result.stderr and "'nobody'" in result.stderr


def test_alarm_topic_passes_nag_and_cfn_lint(email_synth: Synth, tmp_path: Path) -> None:
    annotations = Annotations.from_stack(email_synth.stack)
    findings = [*annotations.find_error("*", NAG_FINDING),
                *annotations.find_warning("*", NAG_FINDING)]
    assert [f"{f.id}: {f.entry.data}" for f in findings] == []
    path = tmp_path / "email.template.json"
    path.write_text(json.dumps(email_synth.json))
    lint = subprocess.run([str(Path(sys.executable).parent / "cfn-lint"), "--ignore-checks",
                           "W3005", "--", str(path)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr


# ---- the cache's idle cost, as the README and the user guide state it --------------------
def test_readme_states_the_valkey_idle_cost_from_the_shipped_prices() -> None:
    prices = json.loads(PRICES.read_text())
    monthly = prices["valkey_min_gb"] * prices["valkey_gb_hour"] * HOURS_PER_MONTH
    for doc in ("README.md", "docs/user-guide.md"):  # "Costs after a run" in both
        text = (REPO_ROOT / doc).read_text()
        assert f"${monthly:.2f}" in text, f"{doc} should state the idle cost ${monthly:.2f}"
