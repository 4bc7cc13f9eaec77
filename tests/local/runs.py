"""One ``python -m local run`` as the end-to-end tests drive it: a subprocess with its own
report folder, and what it left there."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasdl.contract.plan import Plan
from infra.settings import REPO_ROOT
from local.aws.template import synthesize


@dataclass(frozen=True)
class Run:
    code: int
    output: str
    report: dict[str, Any]
    model: bytes | None  # the final weights (model.npy) of a successful run


def local_run(plan: Path, cdk_out: Path | None, report_dir: Path, run_id: str, *args: str,
              timeout_s: int) -> Run:
    """Run the plan (``cdk_out``: reuse that synth; None: synthesize) and read its report."""
    reuse = [] if cdk_out is None else ["--cdk-out", str(cdk_out)]
    # idle sandboxes are reused, as on Lambda (and in bench.chaos's trials): a warm start
    # saves a worker's imports, a quarter of a two-segment run's CPU here
    return _local_run(["--plan", str(plan), *reuse, "--run-id", run_id, *args], report_dir,
                      timeout_s)


def resumed_run(kept: Path, cdk_out: Path, report_dir: Path, *args: str, timeout_s: int
                ) -> Run:
    """``python -m local run --resume kept`` (the kept run's plan, dataset and id), reusing
    ``cdk_out``, and its report."""
    return _local_run(["--resume", str(kept), "--cdk-out", str(cdk_out), *args], report_dir,
                      timeout_s)


def _local_run(argv: list[str], report_dir: Path, timeout_s: int) -> Run:
    done = subprocess.run(
        [sys.executable, "-m", "local", "run", *argv, "--report-dir", str(report_dir),
         "--timeout", str(timeout_s)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s + 60, check=False)
    output = done.stdout + done.stderr
    assert (report_dir / "report.json").is_file(), output[-3000:]
    model = report_dir / "model.npy"
    return Run(done.returncode, output, json.loads((report_dir / "report.json").read_text()),
               model.read_bytes() if model.is_file() else None)


def with_memory(plan: Path, memory_mb: int, directory: Path) -> Path:
    """A copy of ``plan`` deployed at another memory size."""
    changed = json.loads(plan.read_text())
    changed["deployment"]["memory_mb"] = memory_mb
    path = directory / f"plan-{memory_mb}.json"
    path.write_text(json.dumps(changed))
    return path


@dataclass(frozen=True)
class Job:
    """A plan and the cdk.out synthesized from it, reused by every run of a module."""

    plan: Path
    cdk_out: Path


Synthesized = Callable[[Path, str], Job]


def synthesizer(directory: Callable[[str], Path]) -> Synthesized:
    """A plan on a channel, synthesized once per distinct plan (``directory(name)`` makes a
    fresh folder): the runs of a module on one deployment share its synth."""
    done: dict[str, Job] = {}

    def synth(plan: Path, channel: str) -> Job:
        text = json.dumps(Plan.load(plan).on_channel(channel).to_dict(), sort_keys=True)
        if text not in done:
            work = directory(f"synth-{channel}")
            (work / "plan.json").write_text(text)
            template = synthesize(work / "plan.json", work / "cdk.out")
            done[text] = Job(work / "plan.json", template.parent)
        return done[text]

    return synth
