"""Build a channel from a small typed config.

The functions get theirs from their settings (fasdl.contract.settings:
``Settings.exchange_config``),
the only environment form; S3 credentials come from the usual AWS chain.

No hook here for tests or emulation: the local Lambda emulator shapes bandwidth from outside,
replacing :func:`build_channel` in its sandbox process before the handler's module is imported
(local/lambda_/lambda_speed.py ``install_shaping``), as Lambda's own runtime sits outside a handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from fasdl.exchange.channel.base import Channel
from fasdl.exchange.channel.valkey import DEFAULT_TTL_S

KINDS = ("s3", "valkey")


class ChannelConfigError(ValueError):
    """An invalid channel config; the message names the field."""


@dataclass(frozen=True)
class ChannelConfig:
    """Where a run's shards are exchanged. Fields of the other kind are ignored."""

    kind: Literal["s3", "valkey"]
    prefix: str = ""
    ttl_s: int = DEFAULT_TTL_S
    # S3
    bucket: str = ""
    endpoint_url: str | None = None
    path_style: bool = False
    region: str | None = None
    # Valkey
    host: str = ""
    port: int = 6379
    tls: bool = False
    cluster: bool = False
    ca_certs: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ChannelConfigError(f"channel field 'kind': must be one of {KINDS}, "
                                     f"got {self.kind!r}")
        if self.kind == "s3" and not self.bucket:
            raise ChannelConfigError("channel field 'bucket': required when kind is 's3'")
        if self.kind == "valkey" and not self.host:
            raise ChannelConfigError("channel field 'host': required when kind is 'valkey'")
        if not 0 < self.port < 65536:
            raise ChannelConfigError(f"channel field 'port': must be in [1, 65535], "
                                     f"got {self.port}")
        if self.ttl_s <= 0:
            raise ChannelConfigError(f"channel field 'ttl_s': must be > 0, got {self.ttl_s}")


def build_channel(config: ChannelConfig, *, session: Any | None = None) -> Channel:
    """The channel the config describes (``session``: an optional boto3 Session for S3)."""
    if config.kind == "s3":
        from fasdl.exchange.channel.s3 import S3Channel  # boto3 only when S3 is used

        return S3Channel(
            config.bucket, config.prefix, endpoint_url=config.endpoint_url,
            path_style=config.path_style, region=config.region, session=session,
        )
    from fasdl.exchange.channel.valkey import ValkeyChannel

    return ValkeyChannel(
        config.host, config.port, prefix=config.prefix, ttl_s=config.ttl_s, tls=config.tls,
        cluster=config.cluster, ca_certs=config.ca_certs,
    )


__all__ = ["ChannelConfig", "ChannelConfigError", "build_channel"]
