"""Fine-grained assertions on the security decisions: the cache in its own stack, sized from
the plan and reachable only from the workers; an isolated network; TLS-only buckets;
least-privilege IAM; the outputs a user starts a run with."""

from __future__ import annotations

import json
from typing import Any

from fasdl.contract.cache import cache_name
from infra.access import WILDCARD_RESOURCE_ACTIONS
from infra.cache_limits import cache_limits
from infra.network import CACHE_PORT
from tests.infra.conftest import Synth, function_props, ref_of


def test_cache_absent_for_s3(s3_synth: Synth, wide_synth: Synth) -> None:
    for synth in (s3_synth, wide_synth):
        synth.template.resource_count_is("AWS::ElastiCache::ServerlessCache", 0)
        assert synth.cache is None and "CacheName" not in synth.json["Outputs"]


def test_cache_lives_in_its_own_stack(valkey_synth: Synth) -> None:
    """cdk destroy FasdlCacheStack stops the cache's billing: the training stack holds no
    cache and imports nothing from the cache stack, so the latter can always be deleted."""
    assert valkey_synth.cache is not None
    valkey_synth.template.resource_count_is("AWS::ElastiCache::ServerlessCache", 0)
    assert "Fn::ImportValue" not in json.dumps(valkey_synth.json)
    assert valkey_synth.cache.stack.stack_name == "FasdlCacheStack"
    name = cache_name(valkey_synth.stack.stack_name)
    (cache,) = valkey_synth.cache.resources("AWS::ElastiCache::ServerlessCache").values()
    assert cache["Properties"]["ServerlessCacheName"] == name
    assert valkey_synth.json["Outputs"]["CacheName"]["Value"] == name
    assert "CacheEndpoint" in valkey_synth.cache.json["Outputs"]
    # every function that talks to the cache knows it by that name, never by an address
    ours = [function["Properties"]["Environment"]["Variables"] for function
            in valkey_synth.resources("AWS::Lambda::Function").values()
            if "FASDL_CHANNEL" in function["Properties"].get("Environment", {}).get(
                "Variables", {})]
    assert len(ours) >= 4  # worker, trigger, finalize, profiler(s)
    for env in ours:
        assert env.get("FASDL_CACHE_NAME") == name and "FASDL_CACHE_ENDPOINT" not in env


def test_cache_sized_from_plan(valkey_synth: Synth) -> None:
    limits = cache_limits(valkey_synth.settings.plan)
    assert valkey_synth.cache is not None
    valkey_synth.cache.template.has_resource_properties("AWS::ElastiCache::ServerlessCache", {
        "Engine": "valkey", "MajorEngineVersion": "8",
        "CacheUsageLimits": {
            "DataStorage": {"Maximum": limits.storage_gb, "Unit": "GB"},
            "ECPUPerSecond": {"Maximum": limits.ecpu_per_second}},
    })
    assert 1 <= limits.storage_gb <= 5_000
    assert 1_000 <= limits.ecpu_per_second <= 15_000_000


def _exported(stack_json: dict[str, Any], imported: Any) -> str:
    """The logical id a cache-stack Fn::ImportValue refers to in the training stack."""
    name = imported["Fn::ImportValue"]
    for output in stack_json["Outputs"].values():
        if output.get("Export", {}).get("Name") == name:
            return ref_of(stack_json["Resources"], output["Value"])
    raise AssertionError(f"no export named {name}")


def test_cache_admits_only_the_worker_sg(valkey_synth: Synth) -> None:
    resources = valkey_synth.json["Resources"]
    assert valkey_synth.cache is not None
    (cache,) = valkey_synth.cache.resources("AWS::ElastiCache::ServerlessCache").values()
    (cache_sg_ref,) = cache["Properties"]["SecurityGroupIds"]
    cache_sg = _exported(valkey_synth.json, cache_sg_ref)
    worker = function_props(valkey_synth, "handlers.worker.handler")
    (worker_sg_ref,) = worker["VpcConfig"]["SecurityGroupIds"]
    worker_sg = ref_of(resources, worker_sg_ref)
    assert "SecurityGroupIngress" not in resources[cache_sg]["Properties"]
    rules = [rule["Properties"] for rule in
             valkey_synth.resources("AWS::EC2::SecurityGroupIngress").values()
             if ref_of(resources, rule["Properties"]["GroupId"]) == cache_sg]
    assert len(rules) == 1
    (rule,) = rules
    assert ref_of(resources, rule["SourceSecurityGroupId"]) == worker_sg
    assert rule["FromPort"] == rule["ToPort"] == CACHE_PORT
    assert "CidrIp" not in rule
    # finalize deletes the run's keys: it sits in the VPC with the workers' security group
    finalize = function_props(valkey_synth, "handlers.finalize.handler")
    assert finalize["VpcConfig"]["SecurityGroupIds"] == [worker_sg_ref]


def test_trigger_looks_up_only_its_cache(valkey_synth: Synth, s3_synth: Synth) -> None:
    def statements(synth: Synth) -> list[dict[str, Any]]:
        role = ref_of(synth.json["Resources"],
                       function_props(synth, "handlers.trigger.handler")["Role"])
        return [statement for policy in synth.resources("AWS::IAM::Policy").values()
                if {"Ref": role} in policy["Properties"]["Roles"]
                for statement in policy["Properties"]["PolicyDocument"]["Statement"]]

    lookups = [s for s in statements(valkey_synth)
               if s["Action"] == "elasticache:DescribeServerlessCaches"]
    assert len(lookups) == 1
    resource = json.dumps(lookups[0]["Resource"])
    assert f":serverlesscache:{cache_name(valkey_synth.stack.stack_name)}" in resource
    assert not [s for s in statements(s3_synth) if "elasticache" in json.dumps(s["Action"])]


def test_network_is_isolated(valkey_synth: Synth) -> None:
    template = valkey_synth.template
    template.resource_count_is("AWS::EC2::NatGateway", 0)
    template.resource_count_is("AWS::EC2::InternetGateway", 0)
    template.resource_count_is("AWS::EC2::FlowLog", 1)
    endpoints = valkey_synth.resources("AWS::EC2::VPCEndpoint").values()
    assert [e["Properties"]["VpcEndpointType"] for e in endpoints] == ["Gateway"]


# ---- storage ---------------------------------------------------------------------------
def test_every_bucket_denies_non_tls(synth: Synth) -> None:
    resources = synth.json["Resources"]
    buckets = set(synth.resources("AWS::S3::Bucket"))
    denied = set()
    for policy in synth.resources("AWS::S3::BucketPolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if (statement["Effect"] == "Deny" and statement["Condition"] == {
                    "Bool": {"aws:SecureTransport": "false"}}):
                denied.add(ref_of(resources, policy["Properties"]["Bucket"]))
    assert buckets == denied
    for bucket in synth.resources("AWS::S3::Bucket").values():
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True}
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]


def test_removal_policies(s3_synth: Synth) -> None:
    buckets = s3_synth.resources("AWS::S3::Bucket")
    policies = {key.split("Bucket")[0]: value["DeletionPolicy"]
                for key, value in buckets.items()}
    assert policies == {"StorageAccessLogs": "Retain", "StorageDatasets": "Retain",
                        "StorageResults": "Retain", "StorageExchange": "Delete"}
    logged = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    assert len(logged) == 3  # all but the log bucket itself


# ---- IAM -------------------------------------------------------------------------------
def _statements(synth: Synth) -> list[dict[str, Any]]:
    found = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    for role in synth.resources("AWS::IAM::Role").values():
        for inline in role["Properties"].get("Policies", []):
            found.extend(inline["PolicyDocument"]["Statement"])
    return found


def test_wildcard_resources_only_where_required(synth: Synth) -> None:
    for statement in _statements(synth):
        resources = statement["Resource"]
        resources = resources if isinstance(resources, list) else [resources]
        actions = statement["Action"]
        actions = actions if isinstance(actions, list) else [actions]
        assert all("*" not in action for action in actions), statement
        if "*" in resources:
            assert set(actions) <= set(WILDCARD_RESOURCE_ACTIONS), statement


def test_outputs(synth: Synth) -> None:
    outputs = synth.json["Outputs"]
    for name in ("StateMachineArn", "DatasetsBucketName", "ResultsBucketName",
                 "ExchangeBucketName", "StartRunCommand"):
        assert name in outputs
    command = outputs["StartRunCommand"]["Value"]["Fn::Join"][1]
    assert command[0] == "aws stepfunctions start-execution --state-machine-arn "
    assert command[2] == " --input '{}'"


def test_valkey_worker_has_no_s3_exchange_access(valkey_synth: Synth, s3_synth: Synth) -> None:
    def worker_resources(synth: Synth) -> str:
        worker = function_props(synth, "handlers.worker.handler")
        role = ref_of(synth.json["Resources"], worker["Role"])
        policies = [p for p in synth.resources("AWS::IAM::Policy").values()
                    if any(r["Ref"] == role for r in p["Properties"]["Roles"])]
        return json.dumps(policies)

    assert "/exchange/*" not in worker_resources(valkey_synth)
    assert "/exchange/*" in worker_resources(s3_synth)


