"""The stores a function's settings (fasdl.contract.settings) name, as clients: the shard
exchange (the S3 exchange bucket or the Valkey cache), the results bucket's checkpoint store,
and S3 itself. redis is imported only when a Valkey channel is built: the trigger runs
without it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fasdl.aws import sessions
from fasdl.contract.settings import Settings, SettingsError
from fasdl.exchange.channel.base import Channel
from fasdl.exchange.channel.s3 import S3Channel, s3_client_config
from fasdl.exchange.channel.spread import spread_keys

if TYPE_CHECKING:
    from fasdl.exchange.channel.factory import ChannelConfig


def exchange_config(settings: Settings) -> ChannelConfig:
    """The shard exchange: the S3 exchange bucket or the Valkey cache, under the prefix."""
    # the factory imports the Valkey channel, and so redis: the trigger has none
    from fasdl.exchange.channel.factory import ChannelConfig

    if settings.channel == "s3":
        return ChannelConfig(kind="s3", prefix=settings.exchange_prefix,
                             bucket=settings.exchange_bucket, path_style=settings.s3_path_style)
    if not settings.cache_endpoint:
        raise SettingsError(f"no endpoint for the exchange cache {settings.cache_name!r}: the "
                            "run state's 'cache' field is missing (the trigger sets it)")
    return ChannelConfig(kind="valkey", prefix=settings.exchange_prefix,
                         ttl_s=settings.cache_ttl_s, host=settings.cache_endpoint,
                         port=settings.cache_port, tls=settings.cache_tls,
                         cluster=settings.cache_cluster, ca_certs=settings.cache_ca_certs)


def exchange_channel(settings: Settings, key_prefixes: int = 1) -> Channel:
    """The shard exchange, its keys spread over the plan's ``training.exchange_key_prefixes``
    hashed prefixes (fasdl.exchange.channel.spread; always 1 on Valkey)."""
    from fasdl.exchange.channel.factory import build_channel

    return spread_keys(build_channel(exchange_config(settings)), key_prefixes)


def results_store(settings: Settings, client: Any | None = None) -> S3Channel:
    """The results bucket under ``runs/``: checkpoints (keys ``{run}/checkpoint/...``)."""
    return S3Channel(settings.results_bucket, settings.runs_prefix,
                     client=client or s3_client(settings))


def s3_client(settings: Settings) -> Any:
    """A boto3 S3 client; boto3 itself reads AWS_ENDPOINT_URL_S3 and the credentials."""
    return sessions.client("s3", config=s3_client_config(path_style=settings.s3_path_style))
