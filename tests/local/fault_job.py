"""The job the fault, out-of-memory and guard runs share (cnn-digits, W = 4, 4 epochs = 88
iterations in two segments of 44), and what they read of a run's report."""

from __future__ import annotations

import json
from pathlib import Path

from local.aws.template import synthesize
from local.run.run_options import RunOptions
from local.run.run_prep import prepare_dataset, prepare_plan
from tests.local.runs import Job, Run

EPOCHS = 4  # 22 iterations per epoch
SEGMENT = 44  # two segments
# Peers of a dead worker give up after max(this, 5 x the slowest recent iteration) instead of
# 10 s: long enough that a live peer slowed by the other xdist worker's runs is not taken for
# dead (which would add an attempt), short enough to keep the crash runs quick.
FAST_PEER_WAIT = ["--inject-env", "worker:FASDL_PEER_WAIT_MIN_S=6"]
DISTRIBUTED_CONTEXT = {"inline_map_max_workers": "2"}


def fault_job_plan(work: Path) -> Path:
    """The job's plan and its dataset in ``work``; returns the plan file."""
    plan = prepare_plan(RunOptions(epochs=EPOCHS, segment_iterations=SEGMENT,
                                   adaptive="off"), work,
                        lambda text: None)
    plan, _ = prepare_dataset(plan, RunOptions(), work, lambda text: None)
    plan.save(work / "plan.json")
    return work / "plan.json"


def errors(result: Run, worker: int | None = None) -> list[str]:
    """The errors of a run's invocations (of one worker), in order."""
    return [i["error"] for i in result.report["invocations"]
            if i["error"] and (worker is None or i["worker"] == worker)]


def distributed(plan: Path, work: Path) -> Job:
    """``plan`` synthesized so that W = 4 takes the Distributed Map path: moto's interpreter
    runs the Distributed Map's children as child executions, as Step Functions does."""
    return Job(plan, synthesize(plan, work / "cdk.out", context=DISTRIBUTED_CONTEXT).parent)


def train_segment_mode(job: Job) -> str:
    """The ``Train segment`` Map's mode in the job's synthesized training machine."""
    (template,) = job.cdk_out.glob("*.template.json")
    resources = json.loads(template.read_text())["Resources"]
    (machine,) = [r for r in resources.values() if r["Type"] == "AWS::StepFunctions::StateMachine"
                  and "training" in json.dumps(r["Properties"].get("StateMachineName"))]
    text = "".join(p for p in machine["Properties"]["DefinitionString"]["Fn::Join"][1]
                   if isinstance(p, str))
    return "DISTRIBUTED" if '"Mode":"DISTRIBUTED"' in text else "INLINE"
