"""Profiler Lambda (fasdl.profiling.measure), two actions; invoked by the profiling state machine.

* ``{"action": "profile", "profile_id", "memory_mb"?, "model"?, "dataset"?, "input_shape"?,
  "num_classes"?, "batches"?, "warmup"?, "repeats"?, "sizes_mb"?, "transfer_repeats"?,
  "channels"?, "cache"?}`` (the fields may also come nested in ``"config"``, as the state
  machine sends them; ``cache``: the Valkey endpoint the trigger found, or null): measure
  at this function's memory (``memory_mb``, when given, must equal it:
  it catches a Map item routed to the wrong function), write
  ``profiles/<profile_id>/memory-<M>.jsonl`` to the results bucket, return a small summary.
* ``{"action": "collect", "profile_id", "memories": [...]}``: concatenate those files into
  ``profiles/<profile_id>/samples.jsonl``; returns ``{"samples_key", "bucket", "lines", ...}``.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fasdl.aws import heap
from fasdl.aws.metrics import get_logger
from fasdl.aws.torch_setup import load_torch
from fasdl.contract.cache import parse_endpoint  # profiling imports torch only inside functions
from fasdl.contract.settings import Settings
from fasdl.exchange import stores
from fasdl.exchange.channel.base import Channel
from fasdl.exchange.channel.factory import build_channel
from fasdl.profiling import measure as profiling

logger = get_logger("fasdl-profiler")
heap.configure_allocator()  # measure memory under the allocator the workers run with


def function_memory_mb(context: Any) -> float:
    """The configured memory: the context's, else Lambda's env variable (local runs)."""
    memory = getattr(context, "memory_limit_in_mb", None) or os.environ.get(
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    if memory is None:
        raise RuntimeError("cannot tell this function's memory size: no context and no "
                           "AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    return float(memory)


def _channels(settings: Settings, wanted: tuple[str, ...] | None) -> dict[str, Channel]:
    available = ["s3"] + (["valkey"] if settings.cache_endpoint else [])
    names = list(wanted) if wanted is not None else available
    missing = [name for name in names if name not in available]
    if missing:
        raise profiling.ProfileRequestError(
            f"profiler field 'channels': {', '.join(missing)} not reachable from this "
            f"deployment (available: {', '.join(available)})")
    channels: dict[str, Channel] = {}
    for name in names:
        config = stores.exchange_config(settings)
        if name == "s3" and config.kind != "s3":  # Valkey stacks still own an exchange bucket
            from fasdl.exchange.channel.factory import ChannelConfig

            config = ChannelConfig(kind="s3", prefix=settings.exchange_prefix,
                                   bucket=settings.exchange_bucket,
                                   path_style=settings.s3_path_style)
        channels[name] = build_channel(config)
    return channels


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # Valkey stacks: the cache's endpoint, found by the trigger (profiling state machine)
    try:
        cache = parse_endpoint(event.get("cache"), "cache")
    except ValueError as error:
        raise profiling.ProfileRequestError(f"profiler {error}") from error
    settings = Settings.from_env().with_cache(cache)
    prefix = settings.profiles_prefix
    s3 = stores.s3_client(settings)
    action = event.get("action")
    if action == "collect":
        return profiling.collect(event.get("profile_id"), event.get("memories"), s3,
                                 settings.results_bucket, prefix)
    if action != "profile":
        raise profiling.ProfileRequestError(
            f"profiler field 'action': must be profile or collect, got {action!r}")
    # torch is loaded here, not at import: the unpack does not fit Lambda's 10-s init phase
    # at small memory (docs/cold-start.md); collect never needs it.
    torch_load = load_torch()
    torch_load.check()
    if torch_load.fresh:
        logger.info("torch loaded", extra=torch_load.log_fields())
    if isinstance(event.get("config"), dict):  # the state machine passes its merged input
        event = {**event["config"], **{k: v for k, v in event.items() if k != "config"}}
    request = profiling.ProfileRequest.from_event(event)
    memory = function_memory_mb(context)
    if "memory_mb" in event and float(event["memory_mb"]) != memory:
        raise profiling.ProfileRequestError(
            f"profiler field 'memory_mb': asked for {event['memory_mb']} MB but this function "
            f"has {memory:g} MB")
    channels = _channels(settings, request.channels)
    try:
        summary = profiling.run_profile(request, memory, channels, s3,
                                        settings.results_bucket, prefix)
    finally:
        for channel in channels.values():
            channel.close()
    # this sandbox's cold start at this memory: 0 s of it when an earlier call paid
    return {**summary, "torch_load_s": round(torch_load.seconds if torch_load.fresh else 0.0, 3),
            "torch_load_outcome": torch_load.outcome}
