"""fasdl.contract.settings: one list of variable names, parsed by the handlers and rendered by infra
and the local runner; what one renders the other reads back."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fasdl.contract.settings import ENV_NAMES, Settings, SettingsError

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)


def test_every_setting_has_one_variable_and_no_variable_two_settings() -> None:
    assert set(ENV_NAMES) == {field.name for field in dataclasses.fields(Settings)}
    assert len(set(ENV_NAMES.values())) == len(ENV_NAMES)
    assert all(name.startswith("FASDL_") for name in ENV_NAMES.values())


@given(channel=st.sampled_from(["s3", "valkey"]), bucket=NAMES, port=st.integers(1, 65535),
       tls=st.booleans(), cluster=st.booleans(), path_style=st.booleans(),
       margin=st.floats(0.0, 600.0), ttl=st.integers(1, 86_400),
       inflight=st.floats(0.0, 4096.0))
def test_what_to_env_renders_from_env_reads_back(
        channel: str, bucket: str, port: int, tls: bool, cluster: bool, path_style: bool,
        margin: float, ttl: int, inflight: float) -> None:
    fields: dict[str, Any] = {
        "stack": "TrainStack", "channel": channel, "deployment": "fingerprint",
        "datasets_bucket": f"d-{bucket}", "results_bucket": f"r-{bucket}",
        "exchange_bucket": f"e-{bucket}", "exchange_prefix": "x/", "runs_prefix": "r/",
        "profiles_prefix": "p/", "metrics_namespace": "Ns", "cache_endpoint": "host",
        "cache_name": "train-exchange", "cache_port": port, "cache_tls": tls,
        "cache_cluster": cluster, "cache_ca_certs": "/ca.pem", "cache_ttl_s": ttl,
        "s3_path_style": path_style, "cache_dir": "/tmp/d", "time_margin_s": margin,
        "peer_wait_start_s": 60.0, "peer_wait_min_s": 3.0, "peer_wait_factor": 2.0,
        "fence_check_s": 7.5, "plan_json": '{"version": 1}', "exchange_inflight_mb": inflight}
    assert Settings.from_env(Settings.to_env(**fields)) == Settings(**fields)


def test_defaults_fill_what_a_stack_leaves_unset() -> None:
    env = Settings.to_env(channel="s3", datasets_bucket="d", results_bucket="r",
                          exchange_bucket="e")
    assert Settings.from_env(env) == Settings(stack="fasdl", channel="s3", deployment="",
                                              datasets_bucket="d", results_bucket="r",
                                              exchange_bucket="e")


def test_rendering_an_unknown_setting_names_it() -> None:
    with pytest.raises(SettingsError, match="not a setting: cache_host"):
        Settings.to_env(cache_host="h")


def test_a_missing_variable_is_named() -> None:
    with pytest.raises(SettingsError, match="FASDL_RESULTS_BUCKET is not set"):
        Settings.from_env(Settings.to_env(channel="s3", datasets_bucket="d",
                                          exchange_bucket="e"))


def test_every_results_key_takes_the_runs_prefix_once() -> None:
    """Settings' keys and the trigger's (fasdl.run.run_state, given the prefix alone) go
    through keys.results_key: the prefix is added once, never twice or not at all."""
    from fasdl.contract import keys

    settings = Settings(stack="s", channel="s3", deployment="d", datasets_bucket="d",
                        results_bucket="r", exchange_bucket="e", runs_prefix="r/")
    assert settings.plan_key("run1") == "r/" + keys.plan_key("run1")
    assert settings.fence_object_key("run1") == "r/" + keys.fence_key("run1")
    assert settings.results_key(keys.plan_key("run1")) == settings.plan_key("run1")
    assert keys.results_key("r/", keys.plan_key("run1")) == settings.plan_key("run1")


def test_the_one_reader_variables_are_settings_too() -> None:
    """FASDL_WORKER_FUNCTION, _WORKER_LOG_GROUP, _TORCH_LAYER_STUB and _USER_MODULES are read
    through Settings (issue 40): from_env for the handlers, read_one where no stack is."""
    environ = {"FASDL_STACK": "s", "FASDL_CHANNEL": "s3", "FASDL_DEPLOYMENT": "d",
               "FASDL_DATASETS_BUCKET": "d", "FASDL_RESULTS_BUCKET": "r",
               "FASDL_EXCHANGE_BUCKET": "e", "FASDL_WORKER_FUNCTION": "fn",
               "FASDL_WORKER_LOG_GROUP": "/aws/lambda/fn", "FASDL_TORCH_LAYER_STUB": "1",
               "FASDL_USER_MODULES": '{"net.py:build": "net"}'}
    settings = Settings.from_env(environ)
    assert (settings.worker_function, settings.worker_log_group) == ("fn", "/aws/lambda/fn")
    assert Settings.read_one("torch_layer_stub", environ) == settings.torch_layer_stub == "1"
    assert Settings.user_module_map(settings.user_modules) == {"net.py:build": "net"}
    assert Settings.user_module_map("") == {}
    with pytest.raises(SettingsError, match="FASDL_USER_MODULES: expected a JSON object"):
        Settings.user_module_map("[1]")
