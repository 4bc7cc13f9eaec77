"""One instance instead of Lambda: what a single EC2 instance (or any machine billed by the
hour) would take and cost for the same training job, so the planner can say when Lambda is
not the answer.

An instance run is start-up (boot, image, data) plus E epochs of measured compute, billed per
second with a 60-s minimum (EC2 Linux on-demand): cost = price/h × max(60 s, startup +
E × seconds_per_epoch) / 3,600. The shipped offers and their measurements live in
planner/model/instance/shipped.py; a user's own come from ``NAME:USD_PER_HOUR:SECONDS_PER_EPOCH
[:STARTUP_S]`` (:func:`parse_instance`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from fasdl.contract.fields import FieldError, show

BILLING_MINIMUM_S = 60.0  # EC2 Linux on-demand: per-second billing, at least one minute
SECONDS_PER_HOUR = 3600.0
# Ranges of a user's --instance: beyond them a value is a typo, not an instance. The dearest
# on-demand EC2 instances cost a few hundred USD an hour; an epoch of over 100 days or a start-up
# of over a day would not be planned against a Lambda deadline of at most 1e9 s anyway.
MAX_USD_PER_HOUR = 1000.0
MAX_SECONDS_PER_EPOCH = 1e7
MAX_STARTUP_S = 86400.0
INSTANCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
INSTANCE_FORMAT = "NAME:USD_PER_HOUR:SECONDS_PER_EPOCH[:STARTUP_S]"


class InstanceError(FieldError):
    """A bad instance value; ``field`` names the part (name, usd_per_hour, ...)."""

    def __init__(self, field_name: str, detail: str) -> None:
        super().__init__(f"{field_name}: {detail}", field_name, detail)


@dataclass(frozen=True)
class InstanceOption:
    """One machine to compare with Lambda: its price and how fast it trains this workload."""

    name: str
    usd_per_hour: float
    seconds_per_epoch: float
    startup_s: float
    origin: str = "--instance"      # "shipped" (planner/data/instances.json) or "--instance"
    hardware: str = ""
    price_source: str = "your --instance value"
    price_date: str | None = None
    region: str | None = None
    startup_source: str = ""
    measurement: str = ""           # where seconds_per_epoch comes from, and whether exact
    exact: bool = True              # False: measured on other hardware than this instance
    batch: int | None = None        # the measured batch the epoch time is for

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not INSTANCE_NAME.fullmatch(self.name):
            raise InstanceError("name", "must be 1-64 letters, digits, '.', '_' or '-' "
                                        f"starting with a letter or digit, got {show(self.name)}")
        _check("usd_per_hour", self.usd_per_hour, 0.0, MAX_USD_PER_HOUR, open_low=True)
        _check("seconds_per_epoch", self.seconds_per_epoch, 0.0, MAX_SECONDS_PER_EPOCH,
               open_low=True)
        _check("startup_s", self.startup_s, 0.0, MAX_STARTUP_S, open_low=False)


@dataclass(frozen=True)
class InstanceRun:
    """An option priced for a job of ``epochs`` epochs under ``deadline_s``."""

    option: InstanceOption
    epochs: int
    time_s: float       # start-up + epochs × seconds_per_epoch
    billed_s: float     # max(60 s, time_s)
    cost_usd: float
    deadline_s: float

    @property
    def meets_deadline(self) -> bool:
        return self.time_s <= self.deadline_s

    def to_dict(self) -> dict[str, Any]:
        """The row ``compare --json`` (and ``plan --explain --json``, ``frontier``) prints."""
        option = self.option
        return {
            "kind": "instance", "name": option.name, "origin": option.origin,
            "hardware": option.hardware, "usd_per_hour": option.usd_per_hour,
            "price_source": option.price_source, "price_date": option.price_date,
            "region": option.region, "startup_s": option.startup_s,
            "startup_source": option.startup_source,
            "seconds_per_epoch": option.seconds_per_epoch, "batch": option.batch,
            "measurement": option.measurement, "exact": option.exact, "epochs": self.epochs,
            "time_s": self.time_s, "billed_s": self.billed_s, "cost_usd": self.cost_usd,
            "meets_deadline": self.meets_deadline,
        }


def instance_cost(usd_per_hour: float, run_s: float) -> float:
    """USD for one instance running ``run_s`` seconds: per-second billing, 60-s minimum."""
    return usd_per_hour * max(BILLING_MINIMUM_S, run_s) / SECONDS_PER_HOUR


def price_run(option: InstanceOption, epochs: int, deadline_s: float) -> InstanceRun:
    """The option's time and cost for ``epochs`` epochs (start-up included)."""
    time_s = option.startup_s + epochs * option.seconds_per_epoch
    return InstanceRun(option=option, epochs=epochs, time_s=time_s,
                       billed_s=max(BILLING_MINIMUM_S, time_s),
                       cost_usd=instance_cost(option.usd_per_hour, time_s),
                       deadline_s=deadline_s)


def parse_instance(text: str, default_startup_s: float) -> InstanceOption:
    """``NAME:USD_PER_HOUR:SECONDS_PER_EPOCH[:STARTUP_S]`` as an option; anything else is an
    :class:`InstanceError` naming the part and its allowed range."""
    parts = text.split(":") if isinstance(text, str) else []
    if len(parts) not in (3, 4):
        raise InstanceError("format", f"must be {INSTANCE_FORMAT}, e.g. my-box:1.0:100, "
                                      f"got {show(text)}")
    name, price, epoch = parts[:3]
    startup = parts[3] if len(parts) == 4 else None
    return InstanceOption(
        name=name, usd_per_hour=_number("usd_per_hour", price),
        seconds_per_epoch=_number("seconds_per_epoch", epoch),
        startup_s=default_startup_s if startup is None else _number("startup_s", startup),
        startup_source=("your --instance value" if startup is not None else
                        f"the default for --instance rows ({default_startup_s:g} s: boot + "
                        "a CPU torch environment; a 4th field sets your own)"),
        measurement="your measurement (--instance)")


def _number(field_name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InstanceError(field_name, f"must be a number, got {show(text)}") from None


def _check(field_name: str, value: object, low: float, high: float, *, open_low: bool) -> None:
    interval = f"{'(' if open_low else '['}{low:g}, {high:g}]"
    if (not isinstance(value, int | float) or isinstance(value, bool)
            or not math.isfinite(value)):
        raise InstanceError(field_name, f"must be a finite number in {interval}, "
                                        f"got {show(value)}")
    if not (low < value if open_low else low <= value) or value > high:
        raise InstanceError(field_name, f"must be in {interval}, got {value:g}")
