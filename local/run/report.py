"""Progress while a local run trains, and its summary + report folder afterwards.

Workers write one result JSON per segment attempt to the results bucket
(``runs/<run_id>/segments/<index:05d>/attempt-<a>/worker-<w:04d>.json``, fasdl.run.segment_runner);
:class:`Progress` polls those keys and prints a line per finished segment. :func:`build_report`
turns them, the plan's prediction and the emulator's invocations into one JSON-able dict;
:func:`write_report` writes ``report.json``, ``training.png`` (loss, accuracy; an adaptive
run's workers beside the loss) and
``time_split.png`` (where each worker's time went).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fasdl.contract.plan import Plan
from local.lambda_.invocation import Invocation
from local.servers.layout import LAYOUT

# Worker time buckets, from the result's "time" map: exchange = upload + aggregate + download.
TIME_PARTS = {"load": ("load_s",), "compute": ("compute_s",),
              "exchange": ("upload_s", "aggregate_s", "download_s"), "idle": ("idle_s",),
              "checkpoint": ("checkpoint_s", "eval_s")}


class Progress:
    """Polls the segment results of one run and reports each segment once all its workers
    wrote (the W its results name: an adaptive run's changes; else the plan's)."""

    def __init__(self, s3: Any, bucket: str, run_id: str, workers: int, total_segments: int,
                 say: Callable[[str], None] = print) -> None:
        self.s3, self.bucket, self.workers = s3, bucket, workers
        self.prefix = LAYOUT.segments_prefix(run_id)
        self.total_segments = total_segments
        self.say = say
        self.results: dict[tuple[int, int], dict[int, dict[str, Any]]] = {}
        self._seen: set[str] = set()
        self._reported: set[tuple[int, int]] = set()

    def poll(self) -> None:
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
            for item in page.get("Contents", []):
                key = item["Key"]
                if key in self._seen or not key.endswith(".json"):
                    continue
                body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
                result = json.loads(body)
                self._seen.add(key)
                segment = result.get("segment", {})
                where = (int(segment.get("index", -1)), int(segment.get("attempt", 0)))
                self.results.setdefault(where, {})[int(result.get("worker", -1))] = result
        for where in sorted(self.results):
            if where not in self._reported and len(self.results[where]) >= self._expected(where):
                self._reported.add(where)
                self.say(segment_line(where, self.results[where], self.total_segments))

    def _expected(self, where: tuple[int, int]) -> int:
        named = [r.get("workers") for r in self.results[where].values()]
        counts = [int(n) for n in named if isinstance(n, int) and n >= 1]
        return max(counts) if counts else self.workers


def segment_line(where: tuple[int, int], results: dict[int, dict[str, Any]],
                 total_segments: int) -> str:
    index, attempt = where
    rows = list(results.values())
    segment = rows[0].get("segment", {})
    first = _mean([r.get("loss_first") for r in rows])
    last = _mean([r.get("loss_last") for r in rows])
    accuracy, mcc = _reported(rows, "accuracy"), _reported(rows, "mcc")
    took = max(float(r.get("time", {}).get("total_s", 0.0)) for r in rows)
    start = int(segment.get("start_iteration", 0))
    end = start + int(segment.get("iterations", 0))
    # a shortened segment adds segments the plan did not count: no "segment 2/1"
    count = (f"/{total_segments}" if index < total_segments
             else f" (the plan had {total_segments}; one was shortened)")
    text = (f"  segment {index + 1}{count} (iterations {start}-{end}, attempt "
            f"{attempt}): loss {_fmt(first)} -> {_fmt(last)}")
    if accuracy is not None:
        text += f", test accuracy {accuracy:.3f}"
    if mcc is not None:
        text += f", MCC {mcc:.3f}"
    loaded = sorted({str(r["initial_weights"]) for r in rows if r.get("initial_weights")})
    if loaded:  # workload.initial_weights: say that the run started from them
        text += f", started from the initial weights {', '.join(loaded)}"
    return text + f", {took:.1f} s"


def _mean(values: Sequence[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return sum(numbers) / len(numbers) if numbers else None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _reported(rows: Sequence[dict[str, Any]], metric: str) -> float | None:
    """The metric worker 0 reported (``accuracy``, or ``mcc`` for two classes)."""
    found = [r[metric] for r in rows if isinstance(r.get(metric), int | float)]
    return float(found[0]) if found else None


def final_segments(results: dict[tuple[int, int], dict[int, dict[str, Any]]]
                   ) -> list[dict[str, Any]]:
    """One row per segment: the last attempt that every worker finished."""
    by_index: dict[int, tuple[int, dict[int, dict[str, Any]]]] = {}
    for (index, attempt), workers in results.items():
        if index not in by_index or attempt > by_index[index][0]:
            by_index[index] = (attempt, workers)
    rows = []
    for index in sorted(by_index):
        attempt, workers = by_index[index]
        values = list(workers.values())
        rows.append({"index": index, "attempt": attempt, "workers": len(values),
                     "loss_first": _mean([r.get("loss_first") for r in values]),
                     "loss_last": _mean([r.get("loss_last") for r in values]),
                     "loss_mean": _mean([r.get("loss_mean") for r in values]),
                     "accuracy": _reported(values, "accuracy"),
                     "mcc": _reported(values, "mcc"),
                     "iterations": max(int(r.get("iterations_done", 0)) for r in values)})
    return rows


def time_split(results: dict[tuple[int, int], dict[int, dict[str, Any]]],
               invocations: Sequence[Invocation], worker_function: str
               ) -> dict[int, dict[str, float]]:
    """Seconds per worker and part; ``startup`` = invocation wall time the handler did not
    measure (process start and imports on a cold start; little on a warm one)."""
    split: dict[int, dict[str, float]] = {}
    handler_total: dict[int, float] = {}
    for workers in results.values():
        for worker, result in workers.items():
            times = result.get("time", {})
            parts = split.setdefault(worker, {name: 0.0 for name in [*TIME_PARTS, "startup"]})
            for name, keys in TIME_PARTS.items():
                parts[name] += sum(float(times.get(key, 0.0)) for key in keys)
            handler_total[worker] = handler_total.get(worker, 0.0) + float(
                times.get("total_s", 0.0))
    wall: dict[int, float] = {}
    for invocation in invocations:
        if invocation.function != worker_function:
            continue
        index = invocation.worker
        if index is not None:
            wall[index] = wall.get(index, 0.0) + invocation.duration_s
    for worker, parts in split.items():
        parts["startup"] = max(0.0, wall.get(worker, 0.0) - handler_total.get(worker, 0.0))
    return dict(sorted(split.items()))


def build_report(plan: Plan, *, run_id: str, channel: str, status: str, measured_s: float,
                 results: dict[tuple[int, int], dict[int, dict[str, Any]]],
                 invocations: Sequence[Invocation], worker_function: str,
                 summary: dict[str, Any] | None, execution: dict[str, Any],
                 failure: dict[str, Any] | None = None) -> dict[str, Any]:
    segments = final_segments(results)
    split = time_split(results, invocations, worker_function)
    totals = {name: round(sum(parts[name] for parts in split.values()), 3)
              for name in [*TIME_PARTS, "startup"]}
    accuracies = [s["accuracy"] for s in segments if s["accuracy"] is not None]
    mccs = [s["mcc"] for s in segments if s["mcc"] is not None]
    prediction = plan.prediction
    return {
        "run_id": run_id, "status": status, "channel": channel,
        "workers": plan.deployment.workers, "epochs": plan.training.epochs,
        "iterations": sum(s["iterations"] for s in segments),
        "measured_s": round(measured_s, 3),
        "predicted_s": prediction.time_s if prediction else None,
        "predicted_cost_usd": prediction.cost_usd if prediction else None,
        "final_accuracy": accuracies[-1] if accuracies else None,
        "final_mcc": mccs[-1] if mccs else None,
        "final_loss": segments[-1]["loss_last"] if segments else None,
        "segments": segments,
        "time_split_s": totals,
        "time_split_per_worker_s": {str(w): {k: round(v, 3) for k, v in parts.items()}
                                    for w, parts in split.items()},
        "invocations": [{"function": i.function, "worker": i.worker, "error": i.error_type,
                         "duration_s": round(i.duration_s, 3), "cold_start": i.cold_start}
                        for i in invocations],
        "starts": {"cold": sum(i.cold_start is True for i in invocations),
                   "warm": sum(i.cold_start is False for i in invocations)},
        "measured_lambda_usd": lambda_cost_usd(plan, invocations),
        # an adaptive run's decisions, one per segment boundary (planner/adapt/run_step.py)
        "adaptations": (summary or {}).get("adaptations") or [],
        "summary": summary, "failure": failure, "execution_error": execution.get("error"),
        "execution_cause": execution.get("cause"),
        "plan": plan.to_dict(),
    }


def lambda_cost_usd(plan: Plan, invocations: Sequence[Invocation]) -> float | None:
    """These invocations' durations and requests priced as Lambda bills them (the plan's
    region and arch): what this run's compute would cost there at this machine's speed.
    None for a region or arch without shipped prices."""
    from planner.model.inputs.profiles import ProfileError, load_prices

    try:
        prices = load_prices(plan.deployment.region)
        per_mb_s = prices.lambda_mb_s(plan.deployment.arch)
    except ProfileError:
        return None
    ran = [i for i in invocations if i.memory_mb is not None and i.service_error is None]
    mb_s = sum(i.duration_s * float(i.memory_mb or 0) for i in ran)
    return round(mb_s * per_mb_s + len(ran) * prices.lambda_request, 6)


def verdict(report: dict[str, Any]) -> str:
    """One line: did it finish, with what metric, in what share of the predicted time."""
    parts = [report["status"]]
    if report.get("final_mcc") is not None:  # two classes: CoLA's metric first
        parts.append(f"test MCC {report['final_mcc']:.3f}")
    if report["final_accuracy"] is not None:
        parts.append(f"test accuracy {report['final_accuracy']:.3f}")
    if report["predicted_s"]:
        ratio = report["measured_s"] / report["predicted_s"]
        parts.append(f"{ratio:.2f}x the predicted time"
                     + (" (within 1.5x)" if ratio <= 1.5 else " (over 1.5x: see time split)"))
    return "verdict: " + ", ".join(parts)


def format_summary(report: dict[str, Any]) -> str:
    lines = [f"Run {report['run_id']}: {report['status']} ({report['channel']} channel, "
             f"W={report['workers']}, {report['iterations']} iterations)"]
    predicted = report["predicted_s"]
    lines.append(f"  time: measured {report['measured_s']:.1f} s, predicted "
                 f"{'n/a' if predicted is None else f'{predicted:.1f} s'} (on AWS Lambda; "
                 "locally the invocations share this machine's CPUs)")
    predicted_usd, measured_usd = report["predicted_cost_usd"], report.get("measured_lambda_usd")
    if predicted_usd is not None and measured_usd is not None:
        lines.append(f"  cost: predicted ${predicted_usd:.6f}; these invocations priced as Lambda "
                     f"compute and requests ${measured_usd:.6f}")
    starts = report.get("starts") or {}
    lines.append(f"  starts: {starts.get('cold', 0)} cold, {starts.get('warm', 0)} warm "
                 "(a warm start reuses an idle sandbox of the function, as Lambda does)")
    if report["final_accuracy"] is not None:
        mcc = report.get("final_mcc")
        lines.append(f"  final test accuracy {report['final_accuracy']:.3f}"
                     + ("" if mcc is None else f", Matthews correlation {mcc:.3f}")
                     + f", final loss {_fmt(report['final_loss'])}")
    reference = report.get("reference") or []
    if reference:
        lines.append(f"  one process on the union batch (--reference), same recipe and rows: "
                     f"{_reference_metrics(reference[-1])}")
    lines.extend(_adaptation_lines(report.get("adaptations") or []))
    totals = report["time_split_s"]
    whole = sum(totals.values()) or 1.0
    parts = ", ".join(f"{name} {value:.1f} s ({100 * value / whole:.0f}%)"
                      for name, value in totals.items())
    lines.append(f"  worker time (sum over workers): {parts}")
    lines.append("    (startup: process start + imports of cold starts, and invoke overhead)")
    if report.get("execution_error"):
        lines.append(f"  error: {report['execution_error']}: "
                     f"{_error_message(report['execution_cause'])}")
    failure = report.get("failure")
    if isinstance(failure, dict):
        lines.append(f"  recorded failure (failure.json): {failure.get('error')}: "
                     f"{_error_message(failure.get('cause'))}")
        if failure.get("advice"):
            lines.append(f"    what to do: {failure['advice']}")
    lines.append(verdict(report))
    return "\n".join(lines)


def _adaptation_lines(adaptations: list[dict[str, Any]]) -> list[str]:
    """One line per re-plan: where, what, why, and the configuration (W, K, B^a, B^n)."""
    def config(found: dict[str, Any] | None) -> str:
        if not found:
            return "-"
        return (f"W={found['workers']} K={found['aggregators']} "
                f"B^a={found['batch_aggregator']} B^n={found['batch_non_aggregator']}")

    lines = [f"  re-plans: {len(adaptations)}, "
             f"{sum(a['action'] == 'change' for a in adaptations)} changed the configuration"
             ] if adaptations else []
    for record in adaptations:
        changed = (f": {config(record['current'])} -> {config(record['chosen'])}"
                   if record["action"] == "change" else "")
        lines.append(f"    before segment {record['segment']}: {record['action']}{changed} "
                     f"({record['reason']})")
    return lines


def _reference_metrics(point: dict[str, Any]) -> str:
    parts = [f"final loss {point['loss_mean']:.4f} (mean of its last segment)"]
    if point.get("accuracy") is not None:
        parts.insert(0, f"test accuracy {point['accuracy']:.3f}")
    if point.get("mcc") is not None:
        parts.insert(1, f"MCC {point['mcc']:.3f}")
    return ", ".join(parts)


def _error_message(cause: Any) -> str:
    """A Lambda error's cause is its JSON error object: show only the message."""
    try:
        parsed = json.loads(cause)
    except (TypeError, ValueError):
        return str(cause)[:600]
    return str(parsed.get("errorMessage", parsed))[:600] if isinstance(parsed, dict) else \
        str(parsed)[:600]


def _configuration_axis(loss_axes: Any, segments: list[dict[str, Any]],
                        adaptations: list[dict[str, Any]]) -> Any:
    """An adaptive run's workers over the iterations, on a second axis beside the loss, each
    change marked where it applied."""
    axis = loss_axes.twinx()
    starts = [0, *itertools.accumulate(s["iterations"] for s in segments)]
    workers = [s["workers"] for s in segments]
    axis.step(starts, [*workers, workers[-1]], where="post", color="tab:green",
              label="workers W")
    for record in adaptations:
        if record["action"] == "change":
            axis.axvline(record["applies_from_iteration"], color="tab:green", linestyle=":")
            axis.annotate(f"W {record['current']['workers']}→{record['chosen']['workers']}",
                          (record["applies_from_iteration"], record["chosen"]["workers"]),
                          color="tab:green", fontsize=8)
    axis.set(ylabel="workers W (adaptive run)", ylim=(0, max(workers) + 1))
    axis.legend(loc="center right")
    return axis


def _training_figure(plt: Any, segments: list[dict[str, Any]],
                     reference: list[dict[str, Any]],
                     adaptations: list[dict[str, Any]] | None = None) -> Any:
    """Loss and test metric at each segment's end iteration; dashed, the single-process
    reference (local.run.reference) when the run trained one; an adaptive run's workers
    beside the loss."""
    figure, (loss_axes, metric_axes) = plt.subplots(1, 2, figsize=(10, 4))
    if adaptations and segments:
        _configuration_axis(loss_axes, segments, adaptations)
    ends = list(itertools.accumulate(s["iterations"] for s in segments))
    loss_axes.plot(ends, [s["loss_last"] for s in segments], marker="o", label="last")
    loss_axes.plot(ends, [s["loss_mean"] for s in segments], marker=".", label="mean")
    marks = [point["iteration"] for point in reference]
    if reference:
        loss_axes.plot(marks, [p["loss_mean"] for p in reference], linestyle="--", marker=".",
                       color="grey", label="mean, one process (reference)")
    loss_axes.set(xlabel="iteration (segment ends)", ylabel="training loss", title="Loss")
    loss_axes.legend()
    metric_axes.plot(ends, [s["accuracy"] for s in segments], marker="o", label="accuracy")
    lowest = 0.0
    if any(s.get("mcc") is not None for s in segments):
        metric_axes.plot(ends, [s.get("mcc") for s in segments], marker="s", label="MCC")
        lowest = min(lowest, *(s.get("mcc") or 0.0 for s in segments))
    for name, style in (("accuracy", "--"), ("mcc", ":")):
        if any(p.get(name) is not None for p in reference):
            metric_axes.plot(marks, [p.get(name) for p in reference], linestyle=style,
                             color="grey", label=f"{name}, one process (reference)")
            lowest = min(lowest, *(p.get(name) or 0.0 for p in reference))
    metric_axes.set(xlabel="iteration (segment ends)", ylabel="test metric",
                    title="Test metric", ylim=(lowest, 1))
    metric_axes.legend()
    return figure


def write_report(report: dict[str, Any], directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / "report.json"]
    written[0].write_text(json.dumps(report, indent=2, sort_keys=True))
    figure = _training_figure(plt, report["segments"], report.get("reference") or [],
                              report.get("adaptations") or [])
    figure.tight_layout()
    written.append(directory / "training.png")
    figure.savefig(written[-1], dpi=100)
    plt.close(figure)

    per_worker = report["time_split_per_worker_s"]
    figure, axes = plt.subplots(figsize=(7, 4))
    bottom = [0.0] * len(per_worker)
    for part in [*TIME_PARTS, "startup"]:
        values = [parts.get(part, 0.0) for parts in per_worker.values()]
        axes.bar(list(per_worker), values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axes.set(xlabel="worker", ylabel="seconds (all segments)", title="Where the time went")
    axes.legend()
    figure.tight_layout()
    written.append(directory / "time_split.png")
    figure.savefig(written[-1], dpi=100)
    plt.close(figure)
    return written
