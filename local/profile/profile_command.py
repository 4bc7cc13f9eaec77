"""``python -m local profile``: the profiler Lambda, per memory, through the emulator; a profile.

1. validate every option (bad input: exit 2 naming the flag, nothing started);
2. ``npx cdk synth`` the default plan on ``--channel`` with ``-c profiling=true -c
   profile_memories=<--memories>`` (or reuse ``--cdk-out``) and read the profiling state
   machine's functions from the template: handler, code dir, environment, timeout, memory;
3. start SeaweedFS (datasets/results/exchange buckets) and, for valkey, a one-node Valkey
   cluster on free loopback ports;
4. invoke, ONE MEMORY AT A TIME (memories in parallel would share this machine's CPUs and
   slow each other down), the function the state machine routes that memory to, with the
   event its Map sends; then the ``collect`` action;
5. download ``samples.jsonl`` and fit it with ``python -m planner fit``'s code (in-process):
   ``workload.json``, ``platform.json``, ``fit.png``, ``summary.json`` in ``--out``.

By default every invocation runs under Lambda emulation (local/lambda_/lambda_speed.py): CPU capped
at M/1769 vCPU and the channel shaped like the platform profile, since profiling an unshaped
machine rarely predicts Lambda. Exit codes of :func:`main`: 0 ok, 1 failed, 2 bad input,
130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasdl.contract.fields import is_int_in
from fasdl.contract.plan import IDENTIFIER
from local.aws.template import TemplateError
from local.lambda_.lambda_speed import EmulationError, LambdaEmulation, load_emulation
from local.profile.profile_fit import (
    DATASETS,
    BaseWorkload,
    ProfileRunError,
    fit_and_write,
    load_base_workload,
)
from local.profile.profile_run import (
    DEFAULT_BATCHES,
    DEFAULT_MEMORIES,
    DEFAULT_SIZES_MB,
    CdkOutError,
    ProfileOptions,
    emulation_summary,
    emulation_text,
    measure,
    prepare_template,
    template_path,
)
from local.servers.managed import ServerError

Say = Callable[[str], None]
MIN_MEMORY_MB, MAX_MEMORY_MB = 128, 10_240  # Lambda's range, as infra/profiling_workflow checks
# The platform profile is named <name>-<arch>-<channel>, at most 64 characters.
MAX_NAME = 64 - len("-x86_64-valkey")
# local/lambda_/throttle.py lets a capped process run a 20 ms burst at full speed before holding it.
CAP_BURST_S = 0.02
# ProfileRequest fields (fasdl/profiling/measure.py) and the flags that set them.
FIELD_FLAGS = {"model": "--model", "dataset": "--dataset", "batches": "--batches",
               "sizes_mb": "--sizes-mb", "repeats": "--repeats", "warmup": "--warmup",
               "transfer_repeats": "--transfer-repeats", "profile_id": "--profile-id",
               "channels": "--channel"}


class ProfileInputError(ValueError):
    """Bad input, found before anything starts (exit 2); names the flag."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


@dataclass(frozen=True)
class LocalProfile:
    """What :func:`run_profile` wrote, and its summary (also in ``summary.json``)."""

    out: Path
    samples: Path
    workload: Path
    platform: Path
    png: Path | None
    summary_path: Path
    summary: dict[str, Any] = field(repr=False)
    plan_command: str | None  # None: the fit is below the quality gates, not accepted
    refused: bool = False  # below the gates without --accept-failed-fit: ``main`` exits 1


@dataclass(frozen=True)
class _Checked:
    name: str
    out: Path
    profile_id: str
    timeout_s: float | None
    emulation: LambdaEmulation | None


# ---- validation -------------------------------------------------------------------------------
def _distinct(flag: str, values: tuple[Any, ...], what: str, unit: str) -> None:
    if len(set(values)) < 2:
        raise ProfileInputError(flag, f"at least 2 distinct {unit} are needed to identify "
                                      f"{what}; got {list(values)}")


def _check_grid(options: ProfileOptions) -> None:
    """Channel, dataset and the memories, batches and sizes the fit needs."""
    if options.channel not in ("s3", "valkey"):
        raise ProfileInputError("--channel", f"must be s3 or valkey, got {options.channel!r}")
    if options.workload is None and options.dataset not in DATASETS:
        raise ProfileInputError("--dataset", f"must be one of {', '.join(DATASETS)}, "
                                             f"got {options.dataset!r}")
    bad = [m for m in options.memories if not is_int_in(m, MIN_MEMORY_MB, MAX_MEMORY_MB)]
    if not options.memories or bad:
        raise ProfileInputError("--memories", f"every memory must be an integer MB in "
                                              f"[{MIN_MEMORY_MB}, {MAX_MEMORY_MB}], got "
                                              f"{bad[0] if bad else 'none'}")
    _distinct("--memories", options.memories, "m of T = a(B+b)/(M+m)", "memory sizes")
    _distinct("--batches", options.batches, "a, b (time) and k, c (memory)", "batch sizes")
    _distinct("--sizes-mb", options.sizes_mb, "p and t of the throughput", "object sizes")


def _check_run(options: ProfileOptions) -> tuple[str, Path]:
    """The profile's name and output folder; threads, timeout and --cdk-out."""
    base = base_workload(options)
    name = options.name or (f"local-{base.name}" if base else
                            f"local-{options.model}-{options.dataset}")
    if not IDENTIFIER.match(name) or len(name) > MAX_NAME:
        raise ProfileInputError("--name", f"must be 1-{MAX_NAME} letters, digits, '_.-' "
                                          f"(starting with a letter or digit), got {name!r}")
    if options.threads is not None and options.threads < 1:
        raise ProfileInputError("--threads", f"must be >= 1, got {options.threads}")
    if options.timeout_s is not None and not 0 < options.timeout_s <= 86_400:
        raise ProfileInputError("--timeout", f"must be in (0, 86400] s, got {options.timeout_s}")
    out = options.out or Path("profiles") / f"local-{options.channel}"
    if out.exists() and not out.is_dir():
        raise ProfileInputError("--out", f"{out} exists and is not a directory")
    if options.cdk_out is not None:
        try:
            template_path(options.cdk_out)
        except CdkOutError as error:
            raise ProfileInputError("--cdk-out", str(error)) from error
    return name, out


def _check_request(options: ProfileOptions, profile_id: str) -> None:
    """The handler's own validation, so its limits (model registry, object sizes) apply."""
    from fasdl.profiling.measure import ProfileRequest, ProfileRequestError

    try:
        ProfileRequest.from_event(_config(options, profile_id))
    except ProfileRequestError as error:
        found = re.search(r"field '(\w+)'", str(error))
        flag = FIELD_FLAGS.get(found.group(1) if found else "", "--model")
        raise ProfileInputError(flag, str(error).split(": ", 1)[-1]) from error


def _emulation(options: ProfileOptions) -> LambdaEmulation | None:
    if options.emulate is None:
        return None
    try:
        return load_emulation(options.emulate, channel=options.channel, cpu=True)
    except EmulationError as error:  # its message already starts with the flag
        raise ProfileInputError("--emulate-lambda",
                                str(error).removeprefix("--emulate-lambda: ")) from error


def validate(options: ProfileOptions) -> _Checked:
    """Every check that needs no server and no synth; raises :class:`ProfileInputError`."""
    _check_grid(options)
    name, out = _check_run(options)
    profile_id = options.profile_id or time.strftime("local-%Y%m%d-%H%M%S", time.gmtime())
    _check_request(options, profile_id)
    return _Checked(name=name, out=out, profile_id=profile_id, timeout_s=options.timeout_s,
                    emulation=_emulation(options))


def base_workload(options: ProfileOptions) -> BaseWorkload | None:
    """The workload file to profile (--workload), or None (--model and --dataset)."""
    if options.workload is None:
        return None
    try:
        return load_base_workload(options.workload)
    except ValueError as error:
        raise ProfileInputError("--workload", str(error)) from error


def _what(options: ProfileOptions) -> dict[str, Any]:
    """The model and its inputs, as the profiler's event names them."""
    base = base_workload(options)
    if base is None:
        return {"model": options.model, "dataset": options.dataset}
    return {"model": base.model, "input_shape": base.input_shape, "num_classes": base.classes}


def _config(options: ProfileOptions, profile_id: str) -> dict[str, Any]:
    """The profiling state machine's merged input (its Map passes it as ``config``)."""
    return {"profile_id": profile_id, **_what(options),
            "batches": sorted(set(options.batches)), "warmup": options.warmup,
            "repeats": options.repeats, "sizes_mb": sorted(set(options.sizes_mb)),
            "transfer_repeats": options.transfer_repeats, "channels": [options.channel],
            "memories": sorted(set(options.memories))}


# ---- run --------------------------------------------------------------------------------------
def run_profile(options: ProfileOptions, say: Say = print) -> LocalProfile:
    """Validate, synthesize, measure each memory, collect and fit; see the module docstring.
    Raises :class:`ProfileInputError` (bad input, nothing started), TemplateError, ServerError
    or :class:`ProfileRunError` (a failed invocation or fit)."""
    checked = validate(options)
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="fasdl-profile-"))
    try:
        try:
            template = prepare_template(options, work, say)
        except CdkOutError as error:
            raise ProfileInputError("--cdk-out", str(error)) from error
        checked.out.mkdir(parents=True, exist_ok=True)
        config = _config(options, checked.profile_id)
        measured = measure(options, template, config=config, emulation=checked.emulation,
                           timeout_s=options.timeout_s, out=checked.out, work=work, say=say)
        base = base_workload(options)
        outputs = fit_and_write(
            measured.samples, checked.out, work, name=checked.name,
            model=base.model if base else options.model,
            info=base.dataset if base else DATASETS[options.dataset], base=base,
            channel=options.channel, accept_failed_fit=options.accept_failed_fit,
            provenance=(f"python -m local profile ({checked.profile_id}): "
                        f"{emulation_text(checked.emulation)}; S3 is SeaweedFS on loopback"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    warnings = short_iterations(measured.samples, checked.emulation)
    summary = {
        "status": "fit_failed" if outputs.refused else "ok",
        "profile_id": checked.profile_id, **_what(options),
        "channel": options.channel,
        "memories": config["memories"], "batches": config["batches"],
        "sizes_mb": config["sizes_mb"], "warmup": options.warmup, "repeats": options.repeats,
        "transfer_repeats": options.transfer_repeats,
        "emulation": emulation_summary(checked.emulation),
        "invocations": measured.invocations, **outputs.summary, "warnings": warnings,
        "elapsed_s": round(time.monotonic() - began, 1),
    }
    summary_path = checked.out / "summary.json"
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    for line in [*outputs.lines, *warnings]:
        say(line)
    say(f"wrote {', '.join(str(p) for p in outputs.written)}, {summary_path} "
        f"in {summary['elapsed_s']:.0f} s")
    if outputs.plan_command is None:
        say("the fit is below the quality gates (summary.json, 'gates'): no plan command; "
            "profile again as the warning says, or pass --accept-failed-fit to plan with it "
            "(the plan then says so on its first line)")
    else:
        say(f"plan with it (set the deadline, batch cap and epochs of your job):\n"
            f"  {outputs.plan_command}")
    return LocalProfile(out=checked.out, samples=outputs.samples, workload=outputs.workload,
                        platform=outputs.platform, png=outputs.png, summary_path=summary_path,
                        summary=summary, plan_command=outputs.plan_command,
                        refused=outputs.refused)


def short_iterations(samples: Path, emulation: LambdaEmulation | None) -> list[str]:
    """A warning when capped iterations are too short for the cap to show in their median."""
    if emulation is None or not emulation.cpu:
        return []
    train = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    short = [f"{r['batch']}@{r['memory_mb']:g}MB" for r in train
             if r.get("kind") == "train" and r["seconds"] < CAP_BURST_S]
    if not short:
        return []
    return [f"warning: {len(short)} training sample(s) took < {CAP_BURST_S * 1000:g} ms per "
            f"iteration (B@M: {', '.join(short)}). The CPU cap lets such short iterations run "
            "at full speed and the profiler keeps the median, so they barely slow down at small "
            "M and m comes out too large (time too flat in M). Profile larger --batches or a "
            "bigger --model/--dataset for a memory-dependent fit."]


# ---- CLI --------------------------------------------------------------------------------------
def _joined(values: list[Any]) -> str:
    return ",".join(f"{v:g}" for v in values)


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``profile`` to ``python -m local``'s subcommands."""
    parser = commands.add_parser(
        "profile", help="profile the profiler Lambda locally per memory; fit planner profiles",
        description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--memories", type=int, nargs="+", default=list(DEFAULT_MEMORIES),
                        metavar="MB", help=f"function memories in [{MIN_MEMORY_MB}, "
                        f"{MAX_MEMORY_MB}], at least 2 (default {_joined(list(DEFAULT_MEMORIES))})")
    parser.add_argument("--channel", default="s3", metavar="{s3,valkey}",
                        help="exchange channel whose transfers are measured (default s3)")
    parser.add_argument("--workload", type=Path, help="a workload of your own model and data "
                        "(python -m planner workload new): its model, input shape, classes "
                        "and dataset size; replaces --model and --dataset")
    parser.add_argument("--model", default="cnn", help="registry model (default cnn)")
    parser.add_argument("--dataset", default="digits", metavar="{digits,cifar10}",
                        help="input shape, classes and dataset size (default digits)")
    parser.add_argument("--batches", type=int, nargs="+", default=list(DEFAULT_BATCHES),
                        metavar="B", help="batch sizes, at least 2 (default "
                        f"{_joined(list(DEFAULT_BATCHES))})")
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=list(DEFAULT_SIZES_MB),
                        metavar="MB", help="object sizes, at least 2 (default "
                        f"{_joined(list(DEFAULT_SIZES_MB))})")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations (default 2)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed iterations per batch size, median kept (default 5)")
    parser.add_argument("--transfer-repeats", type=int, default=3,
                        help="transfers per object size and direction (default 3)")
    parser.add_argument("--name", help="workload profile name (default local-<model>-<dataset>)")
    parser.add_argument("--out", type=Path, help="output dir (default profiles/local-<channel>)")
    parser.add_argument("--threads", type=int,
                        help="CPU threads per invocation (default ceil(M/1769), Lambda's vCPUs)")
    parser.add_argument("--cdk-out", type=Path,
                        help="reuse a cdk.out synthesized with -c profiling=true")
    parser.add_argument("--emulate-lambda", nargs="?", const="default", default="default",
                        metavar="PLATFORM", help="cap CPU at M/1769 vCPU and shape the channel "
                        "like PLATFORM (a platform profile; default: the shipped one) - on by "
                        "default")
    parser.add_argument("--no-emulate", dest="emulate_lambda", action="store_const", const=None,
                        help="profile this machine unshaped")
    parser.add_argument("--timeout", type=float,
                        help="seconds per invocation (default: the function's Timeout)")
    parser.add_argument("--profile-id", help="samples prefix in the results bucket "
                        "(default local-<time>)")
    parser.add_argument("--accept-failed-fit", action="store_true",
                        help="exit 0 and print a plan command when the fit is below the "
                             "quality gates (the profile is marked failed_fit either way)")


def options_from_args(args: argparse.Namespace) -> ProfileOptions:
    return ProfileOptions(
        memories=tuple(args.memories), channel=args.channel, model=args.model,
        dataset=args.dataset, batches=tuple(args.batches), sizes_mb=tuple(args.sizes_mb),
        warmup=args.warmup, repeats=args.repeats, transfer_repeats=args.transfer_repeats,
        name=args.name, out=args.out, threads=args.threads, cdk_out=args.cdk_out,
        emulate=args.emulate_lambda, timeout_s=args.timeout, profile_id=args.profile_id,
        workload=args.workload, accept_failed_fit=args.accept_failed_fit)


def main(args: argparse.Namespace, say: Say) -> int:
    """0 profiled, 1 failed (an invocation, or a fit below the gates without
    --accept-failed-fit: its files are written), 2 bad input (nothing started), 130
    interrupted."""
    try:
        profile = run_profile(options_from_args(args), say)
    except ProfileInputError as error:
        print(f"fasdl local profile: {error}", file=sys.stderr)
        return 2
    except (TemplateError, ServerError, ProfileRunError) as error:
        print(f"fasdl local profile: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fasdl local profile: interrupted; stopped every server and invocation",
              file=sys.stderr)
        return 130
    if profile.refused:
        print(f"fasdl local profile: the fit is below the quality gates "
              f"({'; '.join(profile.summary['fit_warnings'])}); the profile is in "
              f"{profile.out}, marked failed_fit", file=sys.stderr)
        return 1
    return 0
