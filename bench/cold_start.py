"""Cold start of the torch layer under Lambda's CPU share: does it fit the 10-s init phase?

Lambda limits an on-demand function's init phase (the handler module's import) to 10 s; when
init does not finish, Lambda retries it at the first invocation under the function timeout
(https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html). A function of
M MB gets M/1769 vCPU. The torch layer unpacks ``torch.tar.zst`` (~100 MB -> 483 MB) into /tmp
and then imports torch; this measures both in fresh ``python -I -S`` processes that see only the
stdlib and the layer's ``python/`` dir (no site-packages), each held to M/1769 vCPU by the local
emulation's CPU cap (local/lambda_/throttle.py, the same one ``--emulate-lambda`` uses):

* cold: ``fasdl_torch_loader.ensure_torch(target)`` into an empty target, then ``import torch``;
* warm: the tree is already there (``reused``), then ``import torch``.

Points: the smallest M the planner may choose for any shipped workload (derived from its memory
grid and the workloads' memory models), 512, 1024, 1769, 3008 MB, and uncapped. Repeats go
round-robin over the points so drift on a shared machine hits all alike; min and median are
reported, wall and CPU (user + sys of the child). The verdict per M: the median cold total fits
10 s with 30 % to spare (a Lambda vCPU and disk are not this machine's).

``--layer DIR`` (default ``layers/torch/dist``, what ``make layer`` writes). When it holds no
layer, one is built at zstd -3 into a temporary dir first (~30 s; ``FASDL_TORCH_WHEEL`` names a
local wheel) for the measuring interpreter's CPython; its level is in the JSON. Decompression
speed barely depends on the level. The layer's zstandard and .pyc are built for one CPython
(python3.12 for Lambda): ``--python`` must be an interpreter of that version.

    .venv/bin/python -m bench.cold_start [--layer DIR] [--python PY] [--repeats 3]
        [--scratch DIR] [--out FILE]

The last line printed is one JSON object (also written to ``--out``). ``--smoke`` (or
FASDL_BENCH_SMOKE=1, bench/smoke.py): the smallest M only, one repeat, the JSON written to a
temporary folder unless ``--out`` names a file; measured at 1769 MB only (one vCPU: seconds,
not the smallest M's half a minute), whose point the decision line then judges.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.cold_start_stats import (
    INIT_LIMIT_S,
    SAFETY_MARGIN,
    BenchError,
    Sample,
    fits,
    parse_child,
    summarize,
)
from bench.smoke import parse_args, smoke_folder
from local.lambda_.lambda_speed import LambdaEmulation
from local.lambda_.throttle import CpuThrottle, available_cores

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LAYER = REPO / "layers" / "torch" / "dist"
DEFAULT_OUT = REPO / "docs" / "results" / "cold_start.json"
FIXED_MEMORIES = (512, 1024, 1769, 3008)
REFERENCE_MB = 1769  # one full vCPU: the planner's torch_load_cpu_s is measured here
CHILD_TIMEOUT_S = 300.0

# Runs in the isolated child: argv = layer python dir, target. Phase times in the child, CPU
# from its own rusage (all threads); the last line is JSON.
CHILD = r"""
import json, resource, sys, time
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime
layer_python, target = sys.argv[1], sys.argv[2]
sys.path.insert(0, layer_python)
t0, c0 = time.monotonic(), cpu()
import fasdl_torch_loader
fasdl_torch_loader.ensure_torch(target)
t1, c1 = time.monotonic(), cpu()
import torch
t2, c2 = time.monotonic(), cpu()
assert torch.__file__.startswith(target), torch.__file__
print(json.dumps({"outcome": fasdl_torch_loader.last_result.outcome, "unpack_s": t1 - t0,
                  "unpack_user_s": c1[0] - c0[0], "unpack_sys_s": c1[1] - c0[1],
                  "import_s": t2 - t1, "import_user_s": c2[0] - c1[0],
                  "import_sys_s": c2[1] - c1[1],
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def smallest_memory_mb() -> tuple[int, list[str]]:
    """The smallest M the planner's grid offers any shipped workload (its smallest batch fits
    M_B = k·B + c and M + m > 0), and the workloads that can run there."""
    from planner.model.inputs.problem import Problem
    from planner.model.inputs.profiles import (
        known_workloads,
        load_platform,
        load_prices,
        load_workload,
    )

    platform, prices = load_platform("s3"), load_prices()
    smallest: dict[str, int] = {}
    for name in known_workloads():
        problem = Problem(workload=load_workload(name), platform=platform, prices=prices,
                          epochs=1, deadline_s=1e9, max_global_batch=10_000_000)
        grid = problem.memory_grid()
        ok = ((problem.workload.max_batch(grid) >= problem.batch_step)
              & (grid + problem.workload.m > 0))
        if ok.any():
            smallest[name] = int(grid[ok].min())
    if not smallest:
        raise BenchError("no shipped workload fits any memory of the planner's grid")
    low = min(smallest.values())
    return low, sorted(name for name, memory in smallest.items() if memory == low)


def torch_load_estimate(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """torch_load_cpu_s for the planner: the median CPU seconds (user + sys) of a cold unpack +
    import at one full vCPU. Then how well load(M) = that / min(M/1769, 1) predicts each point's
    wall, and the CPUs the load keeps busy uncapped (<= 1: more vCPUs cannot speed it up)."""
    reference = next((p for p in points if p["memory_mb"] == REFERENCE_MB), None)
    if reference is None:
        return {}
    cpu_s = reference["cold"]["cpu_s"]["median"]
    checks = []
    for point in points:
        if point["vcpu"] is None:
            continue
        predicted = cpu_s / min(point["vcpu"], 1.0)
        measured = point["cold"]["total_s"]["median"]
        checks.append({"memory_mb": point["memory_mb"], "predicted_s": round(predicted, 2),
                       "measured_s": measured, "error": round(predicted / measured - 1.0, 3)})
    uncapped = next((p for p in points if p["vcpu"] is None), None)
    busy = (None if uncapped is None else
            round(uncapped["cold"]["cpu_s"]["median"] / uncapped["cold"]["total_s"]["median"], 3))
    return {"torch_load_cpu_s": cpu_s, "uncapped_cpus_busy": busy, "model_check": checks}


def format_table(points: Sequence[dict[str, Any]]) -> str:
    """Median (min) per point, seconds."""
    def cell(block: dict[str, Any], key: str) -> str:
        return f"{block[key]['median']:6.2f} ({block[key]['min']:5.2f})"

    header = (f"{'M (MB)':>8} {'vCPU':>5} | {'cold unpack':>14} {'import':>14} {'total':>14} "
              f"{'CPU':>14} | {'warm total':>14} {'CPU':>14} | fits 10 s (30 % margin)")
    rows = [header, "-" * len(header)]
    for p in points:
        memory = "uncapped" if p["memory_mb"] is None else str(p["memory_mb"])
        vcpu = "-" if p["vcpu"] is None else f"{p['vcpu']:.2f}"
        verdict = ("yes" if p["fits_10s"] else "NO") + (
            " (yes)" if p["fits_10s_with_margin"] else " (NO)")
        cold, warm = p["cold"], p["warm"]
        rows.append(f"{memory:>8} {vcpu:>5} | {cell(cold, 'unpack_s')} {cell(cold, 'import_s')} "
                    f"{cell(cold, 'total_s')} {cell(cold, 'cpu_s')} | {cell(warm, 'total_s')} "
                    f"{cell(warm, 'cpu_s')} | {verdict}")
    return "\n".join(rows)


def decision(points: Sequence[dict[str, Any]], smallest_mb: int) -> str:
    """The rule of docs/cold-start.md: lazy load when the smallest M leaves < 30 % spare."""
    point = next(p for p in points if p["memory_mb"] == smallest_mb)
    total = point["cold"]["total_s"]["median"]
    if fits(total, margin=SAFETY_MARGIN):
        return (f"init: cold unpack + import {total:.1f} s at {smallest_mb} MB leaves >= "
                f"{SAFETY_MARGIN:.0%} of the {INIT_LIMIT_S:g}-s init phase")
    return (f"lazy: cold unpack + import {total:.1f} s at {smallest_mb} MB does not fit "
            f"{INIT_LIMIT_S * (1 - SAFETY_MARGIN):g} s ({INIT_LIMIT_S:g} s minus "
            f"{SAFETY_MARGIN:.0%}): load torch on the first invocation")


# ---- running ------------------------------------------------------------------------------------

def run_child(python: str, layer_python: Path, target: Path, share: float | None,
              threads: int) -> Sample:
    """One fresh isolated process, held to ``share`` CPUs (None: uncapped)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = subprocess.Popen(
        [python, "-I", "-S", "-c", CHILD, str(layer_python), str(target)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)  # its own process group: what CpuThrottle holds
    throttle = (CpuThrottle(process.pid, share).start()
                if share is not None and share < available_cores() else None)
    try:
        stdout, stderr = process.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise BenchError(f"a cold start took over {CHILD_TIMEOUT_S:g} s") from None
    finally:
        if throttle is not None:
            throttle.stop()
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        raise BenchError(f"the child failed (exit {process.returncode}): {stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return parse_child(stdout, elapsed, cpu, throttle.stopped_s if throttle else 0.0)


def abi_of(python: str) -> str:
    """CPython's ABI tag of an interpreter, e.g. cp311."""
    code = "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"
    try:
        out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True,
                             check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        raise BenchError(f"--python {python}: cannot run it: {error}") from error
    return out.stdout.strip()


def check_abi(layer: Path, abi: str, python: str) -> None:
    """The layer's zstandard and .pyc are built for one CPython: measure with that one."""
    manifest_path = layer / "torch.tar.zst.json"
    built_for = (json.loads(manifest_path.read_text()).get("python")
                 if manifest_path.is_file() else None)
    if built_for and built_for != abi:
        raise BenchError(f"the layer in {layer} is built for {built_for} but {python} is {abi}:"
                         f" pass --python with a {built_for} interpreter")


def layer_dir(requested: Path, scratch: Path, abi: str) -> Path:
    """``requested`` when it holds a layer, else a fresh zstd -3 build in ``scratch`` for the
    measuring interpreter's CPython (``abi``)."""
    if (requested / "python" / "fasdl_torch_loader.py").is_file() and (
            requested / "torch.tar.zst").is_file():
        return requested
    out = scratch / "layer"
    version = f"{abi[2]}.{abi[3:]}"
    command = [sys.executable, str(REPO / "layers" / "torch" / "build.py"), "--level", "3",
               "--out", str(out), "--python-override", version]
    if os.environ.get("FASDL_TORCH_WHEEL"):
        command += ["--wheel", os.environ["FASDL_TORCH_WHEEL"]]
    print(f"no layer in {requested}: building one at zstd -3 into {out}", flush=True)
    if subprocess.run(command, stdout=subprocess.DEVNULL, check=False).returncode != 0:
        raise BenchError(f"the layer build failed: {' '.join(command)}")
    return out


def measure(python: str, layer: Path, memories: Sequence[int | None], repeats: int,
            scratch: Path) -> list[dict[str, Any]]:
    """Round-robin over the points, ``repeats`` times: a cold start, then a warm one."""
    emulation = LambdaEmulation(platform=None, cpu=True)
    runs: dict[int | None, tuple[list[Sample], list[Sample]]] = {m: ([], []) for m in memories}
    for repeat in range(repeats):
        for memory in memories:
            share = None if memory is None else emulation.cpu_share(memory)
            threads = 1 if memory is None else emulation.threads(memory)
            target = scratch / f"torch-{memory or 'uncapped'}-{repeat}"
            os.sync()  # start on a clean disk: no writeback of the last tree competes
            cold = run_child(python, layer / "python", target, share, threads)
            warm = run_child(python, layer / "python", target, share, threads)
            shutil.rmtree(target)
            if (cold.outcome, warm.outcome) != ("installed", "reused"):
                raise BenchError(f"expected installed then reused, got {cold.outcome} then "
                                 f"{warm.outcome}")
            runs[memory][0].append(cold)
            runs[memory][1].append(warm)
            print(f"  [{repeat + 1}/{repeats}] M={memory or 'uncapped'}: cold "
                  f"{cold.total_s:.2f} s ({cold.cpu_s:.2f} s CPU), warm {warm.total_s:.2f} s",
                  flush=True)
    return [summarize(m, None if m is None else emulation.cpu_share(m), *runs[m])
            for m in memories]


def layer_info(layer: Path) -> dict[str, Any]:
    manifest_path = layer / "torch.tar.zst.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    keys = ("zstd_level", "python", "torch_version", "unpacked_bytes", "files")
    size_mb = (layer / "torch.tar.zst").stat().st_size / 1e6
    return {"dir": str(layer), "archive_mb": round(size_mb, 1),
            **{key: manifest.get(key) for key in keys}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", type=Path, default=DEFAULT_LAYER,
                        help="built layer dir (default layers/torch/dist; built at -3 if empty)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per point (default 3)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the JSON goes")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter of the measured processes; its CPython must be the "
                             "layer's (default: this one)")
    parser.add_argument("--scratch", type=Path, default=None,
                        help="where the trees are unpacked (default: the system temp dir, "
                             "/tmp as on Lambda)")
    args = parse_args(parser, argv, repeats=1)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.smoke and args.out == DEFAULT_OUT:
        args.out = smoke_folder("cold_start") / DEFAULT_OUT.name
    smallest, workloads = smallest_memory_mb()
    memories: list[int | None] = ([REFERENCE_MB] if args.smoke else
                                  [*sorted({smallest, *FIXED_MEMORIES}), None])
    judged = REFERENCE_MB if args.smoke else smallest  # the smoke size measures no other
    started = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="fasdl-cold-start-", dir=args.scratch) as tmp:
        try:
            abi = abi_of(args.python)
            layer = layer_dir(args.layer, Path(tmp), abi)
            check_abi(layer, abi, args.python)
            print(f"layer {layer}; points {memories} MB; {args.repeats} repeats", flush=True)
            points = measure(args.python, layer, memories, args.repeats, Path(tmp))
            info = layer_info(layer)
        except BenchError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    print(format_table(points))
    result = {"bench": "cold_start", "layer": info, "host_cores": available_cores(),
              "load_average": {"start": load_before,
                               "end": [round(x, 2) for x in os.getloadavg()]},
              "init_limit_s": INIT_LIMIT_S, "safety_margin": SAFETY_MARGIN,
              "smallest_memory_mb": smallest, "smallest_memory_workloads": workloads,
              "points": points, **torch_load_estimate(points),
              "decision": decision(points, judged),
              "elapsed_s": round(time.monotonic() - started, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(result["decision"])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
