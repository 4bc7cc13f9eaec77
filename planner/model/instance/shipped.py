"""The shipped instance offers (planner/data/instances.json: prices with their source and date,
start-up times with theirs) and the training throughput measured on those instances' hardware
(planner/data/measurements/instance_training_throughput.csv), mapped onto a workload.

A workload gets a shipped row only where the table measured its network at its input size:
the paper's workloads by name, any other workload whose ``model`` and ``input_shape`` match a
measured row. Per device, the fastest fp32 batch within the plan's global-batch cap is used
(the Lambda workers train in fp32 under the same cap), and the epoch time is this workload's
own samples at that batch.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from planner.model.inputs.profiles import WorkloadProfile
from planner.model.instance.options import BILLING_MINIMUM_S, InstanceOption

_DATA = resources.files("planner") / "data"
TABLE_FILE = "instances.json"
MEASUREMENTS_FILE = "measurements/instance_training_throughput.csv"


@dataclass(frozen=True)
class Measurement:
    """One row of the throughput table: a network, input, batch and device."""

    model: str
    input: str          # e.g. 3x32x32, or 2x64 (token ids + mask of 64 tokens)
    batch: int
    device: str         # gpu-h200, gpu-h100 or cpu
    threads: int | None
    amp_bf16: bool
    s_per_iter: float


@dataclass(frozen=True)
class ShippedOffers:
    """The shipped rows for one workload, and why any offer has none."""

    options: tuple[InstanceOption, ...]
    notes: tuple[str, ...]


@cache
def instance_table() -> dict[str, Any]:
    """planner/data/instances.json as read (prices, sources, dates, start-ups)."""
    table: dict[str, Any] = json.loads((_DATA / TABLE_FILE).read_text(encoding="utf-8"))
    return table


@cache
def measurements() -> tuple[Measurement, ...]:
    """The shipped throughput table (copied from the measurements' source, see its README)."""
    text = (_DATA / MEASUREMENTS_FILE).read_text(encoding="utf-8")
    return tuple(
        Measurement(model=row["model"], input=row["input"], batch=int(row["batch"]),
                    device=row["device"],
                    threads=int(row["threads"]) if row["threads"] else None,
                    amp_bf16=row["amp_bf16"] == "true", s_per_iter=float(row["s_per_iter"]))
        for row in csv.DictReader(io.StringIO(text)))


def default_user_startup_s() -> float:
    """The start-up a --instance row gets when it names none."""
    return float(instance_table()["default_user_startup_s"])


def billing_rule() -> str:
    """How the rows are billed, in one phrase (the source: instances.json's ``billing``)."""
    return f"on-demand, per-second billing, {BILLING_MINIMUM_S:.0f} s minimum (EC2 Linux)"


def workload_key(workload: WorkloadProfile) -> tuple[str, str] | None:
    """(model, input) of the table this workload trains, or None if nothing says which."""
    shape = ("x".join(str(n) for n in workload.workload.input_shape)
             if workload.workload.input_shape is not None else None)
    named = instance_table()["workloads"].get(workload.name)
    if named is not None and named["model"] == workload.model and shape in (None,
                                                                            named["input"]):
        return named["model"], named["input"]
    return (workload.model, shape) if shape is not None else None


def shipped_options(workload: WorkloadProfile, max_batch: int) -> ShippedOffers:
    """The shipped instances this workload has a measurement for, each at its best batch."""
    key = workload_key(workload)
    rows = [m for m in measurements() if (m.model, m.input) == key and not m.amp_bf16]
    if not rows:
        return ShippedOffers((), (_unmeasured(workload),))
    options, notes = [], []
    for offer in instance_table()["instances"]:
        found = [m for m in rows if m.device == offer["device"] and m.threads == offer["threads"]]
        fitting = [m for m in found if m.batch <= min(max_batch, workload.samples)]
        if not fitting:
            measured = ", ".join(str(m.batch) for m in found) or "none"
            notes.append(f"no {offer['name']} row: no batch measured on its hardware fits "
                         f"B^g_max {max_batch} and {workload.samples} samples "
                         f"(measured batches: {measured})")
            continue
        best = min(fitting, key=lambda m: m.s_per_iter / m.batch)
        options.append(_option(offer, best, workload.samples))
    return ShippedOffers(tuple(options), tuple(notes))


def _option(offer: dict[str, Any], row: Measurement, samples: int) -> InstanceOption:
    table = instance_table()
    seconds = samples * row.s_per_iter / row.batch
    return InstanceOption(
        name=offer["name"], usd_per_hour=float(offer["usd_per_hour"]),
        seconds_per_epoch=seconds, startup_s=float(offer["startup_s"]), origin="shipped",
        hardware=offer["hardware"], price_source=offer["price_source"],
        price_date=table["price_checked"], region=table["region"],
        startup_source=offer["startup_source"], exact=bool(offer["exact"]), batch=row.batch,
        measurement=(f"{offer['measured_note']}; fp32 at batch {row.batch} (the fastest "
                     f"measured batch within the cap), {row.s_per_iter:g} s a step x "
                     f"{samples:,} samples / {row.batch} = {seconds:.2f} s an epoch, compute "
                     "only"))


def _unmeasured(workload: WorkloadProfile) -> str:
    measured: dict[str, list[str]] = {}
    for m in measurements():
        measured.setdefault(m.input, [])
        if m.model not in measured[m.input]:
            measured[m.input].append(m.model)
    listing = "; ".join(f"{', '.join(models)} at {shape}" for shape, models in measured.items())
    shape = ("" if workload.workload.input_shape is None
             else " at " + "x".join(str(n) for n in workload.workload.input_shape))
    return (f"no shipped instance row: workload {workload.name} (model {workload.model}{shape}) "
            f"has no instance measurement (measured: {listing}); compare with your own: "
            "--instance NAME:USD_PER_HOUR:SECONDS_PER_EPOCH")
