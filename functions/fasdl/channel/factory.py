"""Build a channel from a small typed config, or from ``FASDL_CHANNEL_*`` environment variables.

The environment form is what the Lambda functions receive (infra sets it, the local runner
too): ``FASDL_CHANNEL_KIND`` (s3|valkey), ``_PREFIX``, ``_TTL_S``; for S3 ``_BUCKET``,
``_ENDPOINT_URL``, ``_PATH_STYLE``, ``_REGION``; for Valkey ``_HOST``, ``_PORT``, ``_TLS``,
``_CLUSTER``, ``_CA_CERTS``. S3 credentials come from the usual AWS chain.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from fasdl.channel.base import Channel
from fasdl.channel.valkey import DEFAULT_TTL_S

ENV_PREFIX = "FASDL_CHANNEL_"
KINDS = ("s3", "valkey")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


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

    def to_env(self) -> dict[str, str]:
        """The ``FASDL_CHANNEL_*`` variables that :meth:`from_env` reads back (None omitted)."""
        env: dict[str, str] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            env[ENV_PREFIX + field.name.upper()] = text
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ChannelConfig:
        source = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in fields(cls):
            name = ENV_PREFIX + field.name.upper()
            if name in source:
                values[field.name] = _parse(name, source[name], field.default)
        if "kind" not in values:
            raise ChannelConfigError(f"channel field 'kind': set {ENV_PREFIX}KIND to s3 or valkey")
        return cls(**values)


def _parse(name: str, text: str, default: object) -> object:
    if isinstance(default, bool):
        lowered = text.strip().lower()
        if lowered not in _TRUE | _FALSE:
            raise ChannelConfigError(f"{name}: expected true/false, got {text!r}")
        return lowered in _TRUE
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise ChannelConfigError(f"{name}: expected an integer, got {text!r}") from None
    if default is None:  # optional text: an empty variable means "not set"
        return text or None
    return text


# Wrappers applied to every channel build_channel makes. Product code never registers one;
# the local Lambda emulator does, to shape bandwidth without the handlers knowing.
ChannelWrapper = Callable[[Channel, ChannelConfig], Channel]
_WRAPPERS: list[ChannelWrapper] = []


def register_channel_wrapper(wrapper: ChannelWrapper) -> Callable[[], None]:
    """Wrap every channel built from now on; returns a function that unregisters it."""
    _WRAPPERS.append(wrapper)
    return lambda: _WRAPPERS.remove(wrapper)


def build_channel(config: ChannelConfig, *, session: Any | None = None) -> Channel:
    """The channel the config describes (``session``: an optional boto3 Session for S3)."""
    channel = _build(config, session)
    for wrapper in _WRAPPERS:
        channel = wrapper(channel, config)
    return channel


def _build(config: ChannelConfig, session: Any | None) -> Channel:
    if config.kind == "s3":
        from fasdl.channel.s3 import S3Channel  # boto3 only when S3 is used

        return S3Channel(
            config.bucket, config.prefix, endpoint_url=config.endpoint_url,
            path_style=config.path_style, region=config.region, session=session,
        )
    from fasdl.channel.valkey import ValkeyChannel

    return ValkeyChannel(
        config.host, config.port, prefix=config.prefix, ttl_s=config.ttl_s, tls=config.tls,
        cluster=config.cluster, ca_certs=config.ca_certs,
    )


def channel_from_env(environ: Mapping[str, str] | None = None) -> Channel:
    return build_channel(ChannelConfig.from_env(environ))


__all__ = ["ChannelConfig", "ChannelConfigError", "ChannelWrapper", "build_channel",
           "channel_from_env", "register_channel_wrapper"]
