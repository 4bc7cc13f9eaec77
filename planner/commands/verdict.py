"""Lambda or one instance? The instance rows of ``compare`` and ``plan --explain`` and the
verdict in plain words: which option is cheapest, which meets the deadline, and what would
have to change for the other side to win.

Lambda's side is one option (the cheapest configuration found, labelled by the caller); the
instances' side is every priced :class:`~planner.model.instance.options.InstanceRun`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planner.model.instance.options import SECONDS_PER_HOUR, InstanceRun

WIDTH = 100  # the text wraps here, as wide as the comparison table


@dataclass(frozen=True)
class Option:
    """One way to run the job, as the verdict weighs it."""

    kind: str           # "lambda" or "instance"
    name: str           # e.g. "Lambda (K-REDUCE, 2 x 3,584 MB)" or "one p5.4xlarge"
    time_s: float
    cost_usd: float
    meets_deadline: bool
    run: InstanceRun | None = None
    detail: str = ""    # Lambda: the configuration, e.g. "K-REDUCE (exact), 2 x 3,584 MB"
    # Lambda: the plan's likely range (planner/model/confidence.py), (low, high)
    time_range: tuple[float, float] | None = None
    cost_range: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        ranges = ({} if self.time_range is None or self.cost_range is None else
                  {"time_range_s": list(self.time_range),
                   "cost_range_usd": list(self.cost_range)})
        return {"kind": self.kind, "name": self.name, "time_s": self.time_s,
                "cost_usd": self.cost_usd, "meets_deadline": self.meets_deadline, **ranges}


def instance_option(run: InstanceRun) -> Option:
    return Option("instance", f"one {run.option.name}", run.time_s, run.cost_usd,
                  run.meets_deadline, run)


def duration(seconds: float) -> str:
    """Seconds as a reader says them: 45 s, 6 min, 2.5 h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * SECONDS_PER_HOUR:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / SECONDS_PER_HOUR:.1f} h"


def instance_lines(runs: Sequence[InstanceRun], notes: Sequence[str], billing: str,
                   reference_cost: float | None, reference: str) -> list[str]:
    """The instance table (one row per run, its hardware and where its numbers come from)."""
    lines = [f"One instance instead ({billing}):"]
    if runs:
        header = (f"{'instance':<18} {'$/h':>8} {'s/epoch':>9} {'start-up':>9} "
                  f"{'time (s)':>10} {'cost ($)':>10} {'vs ' + reference:>12}  deadline")
        lines += [header, "-" * len(header)]
    for run in runs:
        option = run.option
        ratio = (f"{run.cost_usd / reference_cost - 1:+.1%}" if reference_cost else "n/a")
        lines.append(f"{option.name:<18} {option.usd_per_hour:>8.3f} "
                     f"{option.seconds_per_epoch:>9.2f} {option.startup_s:>8.0f}s "
                     f"{run.time_s:>10,.0f} {run.cost_usd:>10.4f} {ratio:>12}  "
                     f"{'met' if run.meets_deadline else 'missed'}")
    notes = [*(_provenance(run) for run in runs), *notes]
    if runs:
        notes.append("times: start-up + epochs x measured compute steps (no evaluation, no "
                     "checkpoints); sources: planner/data/instances.json")
    return lines + [textwrap.fill(note, WIDTH, initial_indent="  ", subsequent_indent="    ")
                    for note in notes]


def _provenance(run: InstanceRun) -> str:
    option = run.option
    where = (f"{option.region} on-demand price checked {option.price_date}"
             if option.origin == "shipped" else "price and epoch time are your --instance values")
    hardware = f"{option.hardware}; " if option.hardware else ""
    return f"{option.name}: {hardware}{option.measurement}; {where}"


def verdict(lambda_best: Option | None, runs: Sequence[InstanceRun], deadline_s: float,
            lambda_reason: str = "") -> dict[str, Any]:
    """Which option is cheapest, which meets the deadline and why, as text and fields."""
    options = ([lambda_best] if lambda_best else []) + [instance_option(r) for r in runs]
    if not options:
        return {"text": f"Verdict: nothing to compare: Lambda has no plan ({lambda_reason}) "
                        "and no instance row was given.", "cheapest": None,
                "cheapest_within_deadline": None, "fastest": None}
    within = [o for o in options if o.meets_deadline]
    cheapest = min(options, key=lambda o: o.cost_usd)
    best = min(within, key=lambda o: o.cost_usd) if within else None
    fastest = min(options, key=lambda o: o.time_s)
    limit = f"{deadline_s:,.0f}-s deadline ({duration(deadline_s)})"
    if best is not None and not runs:  # one side only: no claim about instances
        sentences = [f"Verdict: {best.name} meets the {limit}: {_said(best)}; compared with "
                     "Lambda configurations only (no instance row: give --instance, or see "
                     "docs/reference.md)."]
    elif best is not None:
        sentences = [f"Verdict: {best.name} is the cheapest way to meet the {limit}: "
                     f"{_said(best)}."]
    else:
        sentences = [f"Verdict: nothing here meets the {limit}; the fastest is "
                     f"{fastest.name}: {_said(fastest)}."]
    if best is not None and cheapest is not best:
        sentences.append(f"{cheapest.name} would be cheaper ({_money(cheapest)}) but takes "
                         f"{duration(cheapest.time_s)}, past the deadline.")
    if best is not None and fastest is not best:
        sentences.append(f"The fastest is {fastest.name}: {_said(fastest)}.")
    sentences += _lambda_sentences(lambda_best, best or fastest, options, lambda_reason)
    sentences += _range_sentences(lambda_best, [o for o in options if o.run is not None],
                                  deadline_s)
    named = dict.fromkeys(o for o in (best, cheapest) if o is not None)  # once each
    sentences += [f"(The {o.run.option.name} time was measured on other hardware than that "
                  "instance type: read it as a lower bound.)"
                  for o in named if o.run is not None and not o.run.option.exact]
    return {"text": textwrap.fill(" ".join(sentences), WIDTH), "cheapest": cheapest.to_dict(),
            "cheapest_within_deadline": best.to_dict() if best else None,
            "fastest": fastest.to_dict()}


def _lambda_sentences(lambda_best: Option | None, winner: Option, options: Sequence[Option],
                      reason: str) -> list[str]:
    """Why Lambda wins or loses, and what would turn it round."""
    if lambda_best is None:
        return [f"No Lambda configuration fits ({reason})."]
    instances = [o for o in options if o.run is not None]
    if not instances:
        return []
    if winner.run is not None:  # an instance wins: at what price would Lambda?
        run = winner.run
        even = lambda_best.cost_usd * SECONDS_PER_HOUR / run.billed_s
        text = (f"Lambda's cheapest plan ({lambda_best.detail}) takes "
                f"{_said(lambda_best)}; Lambda wins on cost only if {winner.name} cost more "
                f"than ${even:.2f} an hour (it costs ${run.option.usd_per_hour:.2f})")
        if lambda_best.time_s < run.time_s:
            text += (f", and on time only for a deadline under {duration(run.time_s)} "
                     f"that Lambda's {duration(lambda_best.time_s)} still meets")
        return [text + "."]
    other = min(instances, key=lambda o: o.cost_usd)
    assert other.run is not None
    even = lambda_best.cost_usd * SECONDS_PER_HOUR / other.run.billed_s
    late = "" if other.meets_deadline else ", missing the deadline"
    return [f"Lambda wins: the cheapest instance, {other.name}, would take {_said(other)}"
            f"{late}; it would win on cost below ${even:.2f} an hour (it costs "
            f"${other.run.option.usd_per_hour:.2f})."]


def _range_sentences(lambda_best: Option | None, instances: Sequence[Option],
                     deadline_s: float) -> list[str]:
    """Where the Lambda plan's likely range could turn the verdict round."""
    if lambda_best is None or lambda_best.time_range is None or lambda_best.cost_range is None:
        return []
    sentences = []
    low, high = lambda_best.cost_range
    cheaper = [o for o in instances if low < o.cost_usd < lambda_best.cost_usd]
    dearer = [o for o in instances if lambda_best.cost_usd < o.cost_usd < high]
    if cheaper or dearer:
        names = ", ".join(o.name for o in (*cheaper, *dearer))
        sentences.append(f"Within Lambda's likely cost range (${low:.4f}-${high:.4f}) the "
                         f"order against {names} could turn: measure before relying on it "
                         "(docs/profiling.md, planner calibrate).")
    if lambda_best.meets_deadline and lambda_best.time_range[1] > deadline_s:
        sentences.append(f"At the high end of its likely range Lambda would take "
                         f"{duration(lambda_best.time_range[1])}, past the deadline.")
    return sentences


def _money(option: Option) -> str:
    return f"${option.cost_usd:.2f}" if option.cost_usd >= 0.1 else f"${option.cost_usd:.4f}"


def _said(option: Option) -> str:
    text = f"{duration(option.time_s)} and {_money(option)}"
    if option.time_range is None or option.cost_range is None:
        return text
    (fast, slow), (low, high) = option.time_range, option.cost_range
    return (f"{text} (likely {duration(fast)}-{duration(slow)}, "
            f"${low:.4f}-${high:.4f})")
