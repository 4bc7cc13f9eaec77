"""Lambda emulation for local invocations: the CPU share and channel bandwidth of memory M.

Lambda scales CPU with memory (1,769 MB = one vCPU, at most 6 vCPUs at 10,240 MB) and, as the
platform profiles measure, channel throughput too. :class:`LambdaEmulation` tells the emulator
(local/lambda_/emulator.py) what to apply to each invocation of a function with memory M:

* threads: torch/OpenMP threads = ceil(M/1769 vCPU);
* cpu: the process group is held to M/1769 CPUs, CFS-like (local/lambda_/throttle.py, parent side);
* platform: every channel the handler builds is shaped to the profile's tp(M, S)
  (local/lambda_/shaping.py, child side, installed by local/lambda_/invoke.py through
  :func:`install_shaping`).

What this can and cannot emulate: docs/emulation.md.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasdl.contract.plan import ARCHITECTURES, CHANNELS
from local.lambda_.sandbox_env import SHAPING_ENV
from planner.model.inputs.profiles import (
    PlatformProfile,
    ProfileError,
    load_platform,
    load_platform_file,
)

if TYPE_CHECKING:
    from fasdl.exchange.channel.base import Channel
    from fasdl.exchange.channel.factory import ChannelConfig

LAMBDA_MB_PER_VCPU = 1769  # AWS: 1,769 MB = one vCPU; up to 6 vCPUs at 10,240 MB
LAMBDA_MAX_VCPUS = 6
FLAG = "--emulate-lambda"
WORKER_HANDLER = "handlers.worker.handler"  # the training workers (infra/compute.py)


class EmulationError(ValueError):
    """A bad ``--emulate-lambda`` value; the message names the flag."""


@dataclass(frozen=True)
class LambdaEmulation:
    platform: PlatformProfile | None = None  # channel bandwidth from tp(M, S); None: no shaping
    cpu: bool = True  # cap CPU at M/1769 vCPU
    # a platform this many times slower in the workers' compute: M/1769/F vCPU for the
    # training workers (Lambda still shows ceil(M/1769) vCPUs, so the threads stay); the
    # orchestration's functions keep their share (at 256 MB / F the trigger's cold start
    # alone outlasts its timeout). bench.adaptive's cases
    cpu_slower: float = 1.0

    def describe_platform(self) -> str:
        """What a run under this emulation ran on, for its report: ``local-emulation`` and the
        channel's profile (calibrate tells it from AWS Lambda, planner/commands/calibrate.py)."""
        shaped = f" ({self.platform.name})" if self.platform is not None else ""
        slower = f", compute {self.cpu_slower:g}x slower" if self.cpu_slower != 1.0 else ""
        return f"local-emulation{shaped}" + ("" if self.cpu else ", CPU not capped") + slower

    def cpu_share(self, memory_mb: float, handler: str = WORKER_HANDLER) -> float:
        """vCPUs Lambda gives memory M, bounded by this host's CPUs; a worker's over
        ``cpu_slower``."""
        slower = self.cpu_slower if handler == WORKER_HANDLER else 1.0
        return self._lambda_vcpus(memory_mb) / slower

    def threads(self, memory_mb: float) -> int:
        """Threads to run: Lambda shows ceil(M/1769) vCPUs to the function."""
        return max(1, math.ceil(self._lambda_vcpus(memory_mb)))

    @staticmethod
    def _lambda_vcpus(memory_mb: float) -> float:
        return min(memory_mb / LAMBDA_MB_PER_VCPU, LAMBDA_MAX_VCPUS, os.cpu_count() or 1)

    def shaping_env(self, memory_mb: float) -> dict[str, str]:
        """The child's environment that makes local/lambda_/invoke.py shape its channels: JSON
        ``{"platform": <profile>, "memory_mb": M}``."""
        if self.platform is None:
            return {}
        return {SHAPING_ENV: json.dumps({"platform": self.platform.to_dict(),
                                         "memory_mb": memory_mb})}

    def describe(self, memory_mb: float, workers: int = 1) -> str:
        """One line for the run's log; warns when W invocations need more cores than exist."""
        share = self.cpu_share(memory_mb)
        parts = [f"emulating Lambda at M={memory_mb:g} MB: {self.threads(memory_mb)} thread(s)"]
        parts.append(f"CPU capped at {share:.2f} vCPU" if self.cpu else "CPU not capped")
        parts.append(f"channel shaped by {self.platform.name}" if self.platform
                     else "channel not shaped")
        text = ", ".join(parts)
        cores = os.cpu_count() or 1
        if self.cpu and workers * share > cores:
            text += (f"\nwarning: {workers} workers × {share:.2f} vCPU > {cores} cores here: "
                     "they contend, so compute runs slower than on Lambda")
        return text


def _shipped(name: str) -> PlatformProfile | None:
    """``aws-lambda-<arch>-<channel>`` names (load_platform also derives arm64)."""
    for arch in ARCHITECTURES:
        for channel in CHANNELS:
            if name == f"aws-lambda-{arch}-{channel}":
                return load_platform(channel, arch)
    return None


MAX_CPU_SLOWER = 16.0


def load_emulation(platform: str | None, *, channel: str, cpu: bool = True,
                   cpu_slower: float = 1.0) -> LambdaEmulation:
    """The emulation for a run over ``channel``: ``platform`` None or "default" uses the
    shipped profile of that channel, otherwise a shipped profile name or a JSON file path."""
    try:
        if platform is None or platform == "default":
            profile = load_platform(channel)
        else:
            found = _shipped(platform)
            if found is None and not Path(platform).is_file():
                names = ", ".join(f"aws-lambda-{a}-{c}" for a in ARCHITECTURES for c in CHANNELS)
                raise EmulationError(f"{FLAG}: unknown platform {platform!r}: not a shipped "
                                     f"profile ({names}) nor a JSON file path")
            profile = found or load_platform_file(platform)
    except ProfileError as error:
        raise EmulationError(f"{FLAG}: {error}") from error
    if profile.channel != channel:
        raise EmulationError(f"{FLAG}: platform {profile.name!r} profiles the "
                             f"{profile.channel} channel, but the run uses {channel}")
    if not 1.0 <= cpu_slower <= MAX_CPU_SLOWER:
        raise EmulationError(f"--cpu-slower: must be in [1, {MAX_CPU_SLOWER:g}], got "
                             f"{cpu_slower:g}")
    return LambdaEmulation(platform=profile, cpu=cpu, cpu_slower=cpu_slower)


def install_shaping(text: str) -> None:
    """In the invocation's process, before the handler's import: every channel
    ``build_channel`` makes from now on goes through one shaped link (one NIC per sandbox).

    The product has no hook for this: the factory function itself is replaced, so the
    handlers' own imports (``from fasdl.exchange.channel.factory import build_channel``) get it.
    """
    from fasdl.exchange.channel import factory
    from local.lambda_.shaping import BandwidthShaper, ShapedChannel

    spec: dict[str, Any] = json.loads(text)
    platform = PlatformProfile.from_dict(spec["platform"])
    shaper = BandwidthShaper(platform, float(spec["memory_mb"]))
    unshaped = factory.build_channel

    def build_shaped_channel(config: ChannelConfig, *, session: Any | None = None) -> Channel:
        return ShapedChannel(unshaped(config, session=session), platform, shaper.memory_mb,
                             shaper=shaper)

    factory.build_channel = build_shaped_channel


__all__ = ["FLAG", "LAMBDA_MB_PER_VCPU", "SHAPING_ENV", "EmulationError", "LambdaEmulation",
           "install_shaping", "load_emulation"]
