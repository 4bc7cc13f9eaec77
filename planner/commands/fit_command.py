"""``python -m planner fit``: workload and platform profiles from profiler samples (JSONL, from
the profiling state machine or ``python -m local profile``), or the Lambda-S3 platform profiles
from transfer times (CSV). ``--workload FILE`` keeps the fields of the workload profiled
(planner.fit.base_workload)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.commands.cli_inputs import EXIT_OK, CliError, fit_profile_error
from planner.model.inputs.profiles import ProfileError


def add_fit_arguments(fit: argparse.ArgumentParser) -> None:
    source = fit.add_mutually_exclusive_group(required=True)
    source.add_argument("--samples", nargs="+", help="profiler JSONL file(s)")
    source.add_argument("--csv", nargs="?", const="shipped", metavar="PATH",
                        help="memory_mb,object_mb,upload_s,download_s transfer times (no PATH: "
                             "the shipped measurements): the Lambda-S3 platform profiles")
    fit.add_argument("--out", required=True, help="profile JSON; with --kind both, "
                     "<stem>-workload.json and <stem>-platform.json next to it; with --csv, "
                     "the folder for aws-lambda-x86_64-{s3,valkey}.json")
    fit.add_argument("--kind", choices=("workload", "platform", "both"), default="both")
    fit.add_argument("--workload", type=Path,
                     help="the workload profiled (python -m planner workload new wrote it): "
                          "the profile keeps its model, shape, classes, dataset and fields")
    fit.add_argument("--name", help="profile name (required for a workload profile)")
    fit.add_argument("--model-mb", type=float, help="model size when the samples lack it")
    fit.add_argument("--dataset", help="dataset key prefix (default datasets/<name>)")
    fit.add_argument("--dataset-samples", type=int, help="training samples in the dataset")
    fit.add_argument("--dataset-mb", type=float, help="dataset size in MB")
    fit.add_argument("--channel", choices=("s3", "valkey"), help="channel of the platform fit")
    fit.add_argument("--arch", choices=("x86_64", "arm64"),
                     help="architecture (default: from the samples, else x86_64)")
    fit.add_argument("--invocation-overhead", type=float,
                     help="seconds per invocation in the platform profile (default 2.0)")
    fit.add_argument("--png", help="plot measured vs fitted here")
    fit.add_argument("--json", action="store_true", help="print exactly one JSON object")


def command_fit(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    if args.csv is not None:
        return _command_fit_csv(args, emit)
    from planner.fit.base_workload import kept_fields
    from planner.fit.fit_files import FitRequest, run_fit
    from planner.fit.samples import SampleError

    base = _fit_base_workload(args.workload)

    def given(flag: object, field: str) -> Any:  # a flag wins over the workload file
        return flag if flag is not None else base.get(field)

    request = FitRequest(
        samples=args.samples, out=args.out, kind=args.kind, name=given(args.name, "name"),
        model_mb=given(args.model_mb, "model_mb"), dataset=given(args.dataset, "dataset"),
        dataset_samples=given(args.dataset_samples, "samples"),
        dataset_mb=given(args.dataset_mb, "dataset_mb"), channel=args.channel,
        arch=args.arch, invocation_overhead_s=args.invocation_overhead, png=args.png,
        workload_fields=kept_fields(base) if base else {})
    try:
        lines, summary = run_fit(request)
    except SampleError as error:
        raise CliError(error.argument, str(error)) from error
    except ProfileError as error:  # a fitted value the profile rejects, e.g. a bad --name
        raise fit_profile_error(error) from error
    emit(json.dumps({"status": "ok", **summary}) if args.json else "\n".join(lines))
    return EXIT_OK


def _fit_base_workload(path: Path | None) -> dict[str, Any]:
    """The workload file of ``fit --workload``; {} without one."""
    from planner.fit.base_workload import read_base_workload

    if path is None:
        return {}
    try:
        return read_base_workload(path)
    except ValueError as error:
        raise CliError("--workload", str(error)) from error


def _command_fit_csv(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    from planner.fit.measurements import run_csv_fit, shipped_csv

    csv_path = shipped_csv() if args.csv == "shipped" else Path(args.csv)
    if not csv_path.is_file():
        raise CliError("--csv", f"{csv_path}: no such file")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CliError("--out", f"{out} exists and is not a folder (--csv writes two profiles)")
    try:
        lines, summary = run_csv_fit(csv_path, out)
    except ValueError as error:  # missing columns, bad numbers
        raise CliError("--csv", str(error)) from error
    emit(json.dumps({"status": "ok", **summary}) if args.json else "\n".join(lines))
    return EXIT_OK
