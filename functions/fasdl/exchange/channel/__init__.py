"""Exchange channels (S3, Valkey) behind one small interface."""

from fasdl.exchange.channel.base import Backoff, Channel, ChannelError, ChannelTimeout

__all__ = ["Backoff", "Channel", "ChannelError", "ChannelTimeout"]
