"""``local run --keep DIR`` and ``--resume DIR``: a local run outlives its servers, and a run a
guard stopped continues as it would on AWS.

On AWS a guard-stopped run (DEADLINE_EXCEEDED, BUDGET_EXCEEDED) keeps its checkpoint in the
results bucket, and a new execution with ``{"resume": <next segment's run state>, "limits":
{...}}`` continues it (fasdl.run.run_record). A local run's buckets live only as long as its
SeaweedFS, so ``--keep DIR`` copies what a resume needs into DIR when the run ends:

* ``plan.json`` (the plan the run ran) and ``dataset/`` (its files, as uploaded);
* ``results/``: every object of the results bucket (run state, plan, checkpoints, segment
  results; the keys as paths);
* ``kept.json``: the run id, its status and, for a guard stop, the resume input.

``--resume DIR`` starts fresh servers, puts ``results/`` back into the results bucket, and
starts the execution with the kept resume input, its limits replaced by ``--budget-usd`` /
``--deadline-s`` when given. The exchange bucket and the cache hold nothing across a segment
boundary, so they start empty, as a resumed run's do on AWS.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasdl.contract.training import profiles_path
from local.faults.injection import InputError

KEPT_FILE = "kept.json"
RESULTS_DIR = "results"
DATASET_DIR = "dataset"


@dataclass(frozen=True)
class KeptRun:
    directory: Path
    run_id: str
    status: str
    resume_input: dict[str, Any] | None  # None: no guard stopped the run

    @property
    def plan(self) -> Path:
        return self.directory / "plan.json"

    @property
    def dataset(self) -> Path:
        return self.directory / DATASET_DIR

    def execution_input(self, *, budget_usd: float | None,
                        deadline_s: float | None) -> dict[str, Any]:
        """The kept resume input; each given limit replaces the suggested one."""
        if self.resume_input is None:
            raise InputError(f"--resume: the run kept in {self.directory} ended {self.status}, "
                             f"not stopped by a guard (DEADLINE_EXCEEDED, BUDGET_EXCEEDED): "
                             f"nothing to resume")
        given = {"budget_usd": budget_usd, "deadline_s": deadline_s}
        limits = {**self.resume_input.get("limits", {}),
                  **{name: value for name, value in given.items() if value is not None}}
        return {**self.resume_input, **({"limits": limits} if limits else {})}


@dataclass(frozen=True)
class Resumption:
    """A kept run to resume and the execution input that resumes it (limits applied)."""

    kept: KeptRun
    execution_input: dict[str, Any]


def keep_run(directory: Path, *, run_id: str, plan_path: Path, files: Mapping[str, Path],
             client: Any, bucket: str, report: Mapping[str, Any]) -> int:
    """Copy what a resume needs into ``directory`` (module docstring); returns the number of
    results objects kept."""
    directory.mkdir(parents=True, exist_ok=True)
    results = directory / RESULTS_DIR
    shutil.rmtree(results, ignore_errors=True)
    shutil.copyfile(plan_path, directory / "plan.json")
    if profiles_path(plan_path).is_file():  # an adaptive plan's: --resume synthesizes again
        shutil.copyfile(profiles_path(plan_path), profiles_path(directory / "plan.json"))
    for name, path in files.items():
        target = directory / DATASET_DIR / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.resolve() != target.resolve():
            shutil.copyfile(path, target)
    count = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            target = results / item["Key"]
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, item["Key"], str(target))
            count += 1
    stop = report.get("stop")
    resume = stop.get("resume") if isinstance(stop, dict) else None
    (directory / KEPT_FILE).write_text(json.dumps({
        "run_id": run_id, "status": report.get("status"),
        "resume_input": resume.get("input") if isinstance(resume, dict) else None},
        indent=2) + "\n")
    return count


def load_kept(directory: Path) -> KeptRun:
    """The run kept in ``directory``; InputError naming --resume when it is not one."""
    try:
        data = json.loads((directory / KEPT_FILE).read_text())
    except (OSError, ValueError) as error:
        raise InputError(f"--resume: {directory} holds no run kept with --keep ({KEPT_FILE}: "
                         f"{error})") from error
    missing = [str(path) for path in (directory / "plan.json", directory / RESULTS_DIR)
               if not path.exists()]
    if missing or not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
        raise InputError(f"--resume: {directory} is not a complete kept run (missing "
                         f"{', '.join(missing) or 'run_id in ' + KEPT_FILE})")
    resume = data.get("resume_input")
    return KeptRun(directory, data["run_id"], str(data.get("status")),
                   resume if isinstance(resume, dict) else None)


def restore_results(kept: KeptRun, client: Any, bucket: str) -> int:
    """Put the kept results objects back into ``bucket``; returns how many."""
    root = kept.directory / RESULTS_DIR
    count = 0
    for path in sorted(root.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket, path.relative_to(root).as_posix())
            count += 1
    return count
