"""``python -m planner calibrate``: refit a workload's compute coefficients and a platform's cold
start from what runs measured, and say how far the old and the new predictions are from them.

A run's summary (finalize's ``summary.json`` on AWS, or a local run's ``report.json``, which
holds it under ``summary``) has, per role, the measured compute and exchange time per
iteration at the run's memory M and the role's batch B, and the cold start of the first
segment's invocations (fasdl.run.role_times). From those points:

* **compute** T = a·(B+b)/(M+m): the profiler's fit (planner.fit.profiler.fit_compute) when
  the points cover 2+ memory sizes and 2+ batch sizes; a and b at the profile's m when they
  cover one memory size (a run's aggregators and non-aggregators at different batches); a
  alone (the profile's b and m kept) when they cover one batch. What is kept is printed with
  the run that would identify it.
* **cold start** = invocation_overhead_s + torch_load_cpu_s / min(vCPUs(M), 1): a non-negative
  line over 2+ memory sizes (planner.fit.client_cpu.nonnegative_line); at one memory size,
  torch_load_cpu_s at the profile's overhead. Lambda gives a function CPU in proportion to
  its memory, a full vCPU at 1,769 MB
  (https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html).
* **transfer** p, t are not refitted: a run moves one shard size per memory size, and the
  saturation fit needs two object sizes per memory and direction (the profiler's samples).

The refitted groups get provenance ``measured`` (``--measured-on``, today, the fit quality;
planner/model/inputs/provenance.py). Bad input raises CliError naming the file and field (exit 2).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fasdl.contract.fields import is_number
from fasdl.contract.json_input import JsonInputError, load_json_bytes
from planner.commands.cli_inputs import EXIT_OK, CliError
from planner.fit.refit import RolePoint, refit_cold_start, refit_compute
from planner.model.inputs.profiles import (
    PlatformProfile,
    ProfileError,
    WorkloadProfile,
    known_platforms,
    load_platform,
    load_platform_file,
    load_workload,
)

SUMMARY_ARGUMENT = "RUN_SUMMARY"
ROLES = ("aggregator", "non_aggregator")  # fasdl.run.role_times.ROLES
COLD_START_FIELDS = ("invocation_overhead_s", "torch_load_cpu_s")
COEFFICIENTS = ("a", "b", "m", *COLD_START_FIELDS)


def _read(path: Path) -> Any:
    try:
        return load_json_bytes(path.read_bytes(), what=f"{path}:", max_bytes=2**24,
                               max_depth=64)
    except (OSError, JsonInputError) as error:
        raise CliError(SUMMARY_ARGUMENT, f"cannot read {path}: {error}") from error


def _is_local_report(data: Any) -> bool:
    return (isinstance(data, dict) and "roles" not in data
            and isinstance(data.get("summary"), dict))


def ran_on(path: Path) -> str | None:
    """Where a run ran: a local report.json's ``platform`` (``local``, ``local-emulation
    (...)``; one written before reports recorded it: ``local``); None for a summary.json
    from AWS."""
    data = _read(path)
    if not _is_local_report(data):
        return None
    return str(data.get("platform") or "local")


def _roles_of(path: Path) -> dict[str, Any]:
    data = _read(path)
    if _is_local_report(data):
        data = data["summary"]  # a local run's report.json
    roles = data.get("roles") if isinstance(data, dict) else None
    if not isinstance(roles, dict) or not roles:
        raise CliError(SUMMARY_ARGUMENT, f"{path}: field 'roles' is missing or empty: the run "
                       f"recorded no per-role measurements (a run written before runs measured "
                       f"them, or a run that finished no segment); calibrate from a newer run")
    return roles


def _number(figures: dict[str, Any], where: str, name: str, *, optional: bool = False
            ) -> float | None:
    value = figures.get(name)
    if value is None and optional:
        return None
    if not is_number(value) or value <= 0:
        raise CliError(SUMMARY_ARGUMENT, f"{where}.{name}: must be a number > 0, got {value!r}")
    return float(value)


def read_points(paths: Sequence[str | Path], workload: str) -> list[RolePoint]:
    """Every role of every summary; a summary of another workload is refused."""
    points = []
    for path in map(Path, paths):
        for role, figures in sorted(_roles_of(path).items()):
            where = f"{path}: field 'roles.{role}"
            if role not in ROLES or not isinstance(figures, dict):
                raise CliError(SUMMARY_ARGUMENT, f"{where}': not a role ({', '.join(ROLES)}) "
                                                 f"with figures")
            if figures.get("workload") != workload:
                raise CliError(SUMMARY_ARGUMENT, f"{where}.workload': the run trained "
                               f"{figures.get('workload')!r}, not the workload calibrated "
                               f"({workload!r}); pass that run's workload with --workload")
            memory, batch, iterations, compute = (
                _number(figures, where, name) for name in
                ("memory_mb", "batch", "iterations", "compute_s_per_iteration"))
            assert memory and batch and iterations and compute  # checked > 0 above
            points.append(RolePoint(f"{path} roles.{role}", memory, int(batch),
                                    int(iterations), compute,
                                    _number(figures, where, "cold_start_s", optional=True)))
    return points


def _signed(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def compare(points: Sequence[RolePoint], old: tuple[WorkloadProfile, PlatformProfile],
            new: tuple[WorkloadProfile, PlatformProfile]) -> dict[str, Any]:
    """Per role and over all runs: measured, old and new predicted compute per iteration and
    in total (iterations x per iteration), and the cold start; relative errors signed."""
    rows = []
    for point in points:
        row: dict[str, Any] = {"where": point.where, "memory_mb": point.memory_mb,
                               "batch": point.batch, "iterations": point.iterations,
                               "measured_s": point.compute_s}
        for label, (workload, platform) in (("old", old), ("new", new)):
            predicted = float(workload.train_time(point.batch, point.memory_mb))
            row[f"{label}_s"], row[f"{label}_error"] = predicted, _signed(predicted,
                                                                          point.compute_s)
            if point.cold_start_s is not None:
                cold = float(platform.cold_start_s(point.memory_mb))
                row[f"{label}_cold_start_error"] = _signed(cold, point.cold_start_s)
        rows.append(row)
    measured_total = sum(p.iterations * p.compute_s for p in points)
    totals = {"measured_s": measured_total}
    for label in ("old", "new"):
        total = sum(row["iterations"] * row[f"{label}_s"] for row in rows)
        totals[f"{label}_s"], totals[f"{label}_error"] = total, _signed(total, measured_total)
    return {"roles": rows, "total": totals}


def comparison_lines(found: dict[str, Any]) -> list[str]:
    lines = []
    for row in found["roles"]:
        line = (f"{row['where']} (M={row['memory_mb']:g} MB, B={row['batch']}, "
                f"{row['iterations']} iterations): compute per iteration measured "
                f"{row['measured_s'] * 1e3:.3f} ms; old prediction {row['old_s'] * 1e3:.3f} ms "
                f"({row['old_error']:+.1%}), new {row['new_s'] * 1e3:.3f} ms "
                f"({row['new_error']:+.1%})")
        if "old_cold_start_error" in row:
            line += (f"; cold start old {row['old_cold_start_error']:+.1%}, new "
                     f"{row['new_cold_start_error']:+.1%}")
        lines.append(line)
    total = found["total"]
    lines.append(f"total compute over the runs: measured {total['measured_s']:.3f} s; old "
                 f"prediction {total['old_s']:.3f} s ({total['old_error']:+.1%}), new "
                 f"{total['new_s']:.3f} s ({total['new_error']:+.1%})")
    return lines


def load_platform_named(value: str) -> PlatformProfile:
    """A platform profile file, or a shipped name aws-lambda-<arch>-<channel>."""
    try:
        if Path(value).is_file():
            return load_platform_file(value)
        parts = value.split("-")
        if value.startswith("aws-lambda-") and len(parts) == 4:
            return load_platform(parts[3], parts[2])
    except ProfileError as error:
        raise CliError("--platform", str(error)) from error
    raise CliError("--platform", f"{value!r} is neither a platform profile file nor a shipped "
                   f"name ({', '.join(known_platforms())}, or their arm64 variants)")


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("summaries", nargs="+", metavar=SUMMARY_ARGUMENT,
                        help="a run's summary.json (results bucket) or a local report.json")
    parser.add_argument("--workload", required=True, help="the runs' workload: name or file")
    parser.add_argument("--platform", required=True,
                        help="platform profile: file or name (aws-lambda-x86_64-s3, ...)")
    parser.add_argument("--out-workload", type=Path, help="write the refitted workload here")
    parser.add_argument("--out-platform", type=Path, help="write the refitted platform here")
    parser.add_argument("--measured-on", help="where the runs ran, for the provenance "
                        "(default aws-lambda-<the platform's arch>; local-emulation for "
                        "python -m local run --emulate-lambda)")
    parser.add_argument("--refit", nargs="+", choices=COEFFICIENTS, default=(),
                        help="coefficients that must be refitted: an error (exit 2) names "
                             "any the runs cannot identify and the run that would")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")


def _check_required(required: Sequence[str], kept: Sequence[str]) -> None:
    """Refuse a coefficient asked for by --refit that a kept item names."""
    for name in required:
        for item in kept:
            subject = item.split(" kept", 1)[0]
            if subject == name or (subject == "cold start" and name in COLD_START_FIELDS):
                raise CliError("--refit", f"cannot refit {name}: {item}")


def _measured_on(args: argparse.Namespace, platform: PlatformProfile) -> str:
    """Where the runs ran: --measured-on when given; otherwise AWS Lambda, and a local run
    (its report says so) is refused when the profile is AWS Lambda's: its times would turn
    into AWS coefficients (issue 43)."""
    if args.measured_on:
        return str(args.measured_on)
    if platform.name.startswith("aws-lambda"):
        for path in map(Path, args.summaries):
            if (where := ran_on(path)) is not None:
                raise CliError(SUMMARY_ARGUMENT, f"{path}: the run ran on {where}, not on AWS "
                               f"Lambda, so its times would become {platform.name}'s "
                               f"coefficients: calibrate a profile of that platform, or pass "
                               f"--measured-on to refit anyway")
    return f"aws-lambda-{platform.arch}"


def command_calibrate(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    try:
        workload = load_workload(args.workload)
    except ProfileError as error:
        raise CliError("--workload", str(error)) from error
    platform = load_platform_named(args.platform)
    measured_on = _measured_on(args, platform)
    points = read_points(args.summaries, workload.name)
    try:
        compute = refit_compute(workload, points, measured_on)
        cold = refit_cold_start(platform, points, measured_on)
    except ProfileError as error:  # a refitted value the profile's own checks refuse
        raise CliError(SUMMARY_ARGUMENT, f"the refit gave an invalid profile: {error}") from error
    found = compare(points, (workload, platform), (compute.profile, cold.profile))
    written = []
    for path, refit in ((args.out_workload, compute), (args.out_platform, cold)):
        if path is not None:
            path.write_text(json.dumps(refit.profile.to_dict(), indent=2) + "\n")
            written.append(str(path))
    kept = [*compute.kept, *cold.kept, "transfer p, t kept: a run moves one shard size per "
            "memory size; the saturation fit needs two (profile the platform)"]
    _check_required(args.refit, kept)
    if args.json:
        emit(json.dumps({"status": "ok", **found, "kept": kept, "written": written,
                         "measured_on": measured_on,
                         "workload": compute.profile.to_dict(),
                         "platform": cold.profile.to_dict()}))
        return EXIT_OK
    lines = comparison_lines(found) + [f"kept: {item}" for item in kept]
    lines.append(f"the refitted coefficients describe {measured_on} (their provenance says so)")
    lines += [f"wrote {path}" for path in written]
    emit("\n".join(lines))
    return EXIT_OK
