"""fasdl/contract/cache.py against botocore's Stubber: requests and responses are validated
against the real ElastiCache service model, so the lookup reads what AWS returns; and the run
state's ``cache`` field as the state machine hands it back."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber

from fasdl.aws.cache_lookup import NOT_FOUND, locate
from fasdl.contract.cache import cache_stack_name, parse_endpoint
from fasdl.contract.errors import CacheMissing, CacheNotReady
from fasdl.contract.settings import Settings, SettingsError
from fasdl.exchange import stores
from tests.runtime.conftest import offline_client

NAME = "fasdlstack-exchange"
ADDRESS = "fasdlstack-exchange-abc123.serverless.use1.cache.amazonaws.com"


@pytest.fixture
def client() -> Any:
    return offline_client("elasticache")


def _answer(stub: Stubber, status: str, endpoint: dict[str, Any] | None = None) -> None:
    cache: dict[str, Any] = {"ServerlessCacheName": NAME, "Status": status, "Engine": "valkey"}
    if endpoint is not None:
        cache["Endpoint"] = endpoint
    stub.add_response("describe_serverless_caches", {"ServerlessCaches": [cache]},
                      {"ServerlessCacheName": NAME})


def test_available_cache_gives_its_endpoint(client: Any, stub: Stubber) -> None:
    _answer(stub, "available", {"Address": ADDRESS, "Port": 6379})
    assert locate(client, NAME) == {"address": ADDRESS, "port": 6379}


def test_missing_cache_says_how_to_deploy_it(client: Any, stub: Stubber) -> None:
    stub.add_client_error("describe_serverless_caches", NOT_FOUND,
                          "ServerlessCache fasdlstack-exchange not found", 404,
                          expected_params={"ServerlessCacheName": NAME})
    with pytest.raises(CacheMissing, match=r"does not exist; deploy it with `npx cdk deploy "
                                           r"FasdlCacheStack"):
        locate(client, NAME)


def test_the_hint_names_the_cache_stack_of_a_renamed_stack(client: Any, stub: Stubber) -> None:
    # `-c stack_name=TrainStack` deploys TrainCacheStack (infra/stack.py uses the same rule)
    stub.add_response("describe_serverless_caches", {"ServerlessCaches": []},
                      {"ServerlessCacheName": NAME})
    with pytest.raises(CacheMissing, match=r"npx cdk deploy TrainCacheStack -c plan"):
        locate(client, NAME, "TrainStack")
    assert cache_stack_name("Lab") == "LabCache"


@pytest.mark.parametrize("status", ["creating", "modifying"])
def test_cache_on_its_way_is_retried(client: Any, stub: Stubber, status: str) -> None:
    _answer(stub, status)
    with pytest.raises(CacheNotReady, match=status):
        locate(client, NAME)


@pytest.mark.parametrize("status", ["deleting", "create-failed"])
def test_cache_going_or_broken_fails_the_run(client: Any, stub: Stubber, status: str) -> None:
    _answer(stub, status, {"Address": ADDRESS, "Port": 6379})
    with pytest.raises(CacheMissing, match=f"is {status}, not available"):
        locate(client, NAME)


def test_other_api_errors_pass_through(client: Any, stub: Stubber) -> None:
    stub.add_client_error("describe_serverless_caches", "ThrottlingException", "slow down",
                          400, expected_params={"ServerlessCacheName": NAME})
    with pytest.raises(Exception, match="ThrottlingException"):
        locate(client, NAME)


@pytest.mark.parametrize(("value", "field"), [
    ("host:6379", "run.cache"), ({"address": "", "port": 6379}, "run.cache.address"),
    ({"address": ADDRESS, "port": 0}, "run.cache.port"),
    ({"address": ADDRESS, "port": True}, "run.cache.port"),
    ({"address": ADDRESS}, "run.cache.port")])
def test_bad_run_state_cache_names_the_field(value: object, field: str) -> None:
    with pytest.raises(ValueError, match=f"field '{field}'"):
        parse_endpoint(value, "run.cache")


def test_settings_take_the_run_states_cache() -> None:
    env = {"FASDL_CHANNEL": "valkey", "FASDL_DATASETS_BUCKET": "d",
           "FASDL_RESULTS_BUCKET": "r", "FASDL_CACHE_NAME": NAME, "FASDL_CACHE_TLS": "1"}
    settings = Settings.from_env(env)
    with pytest.raises(SettingsError, match="run state's 'cache' field is missing"):
        stores.exchange_config(settings)
    config = stores.exchange_config(
        settings.with_cache(parse_endpoint({"address": ADDRESS, "port": 6380}, "cache")))
    assert (config.host, config.port, config.tls) == (ADDRESS, 6380, True)
    assert settings.with_cache(None) is settings
    with pytest.raises(SettingsError, match="FASDL_CACHE_NAME"):
        Settings.from_env({**env, "FASDL_CACHE_NAME": ""})
