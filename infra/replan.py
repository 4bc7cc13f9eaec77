"""The re-plan function of an adaptive run (issue 42): synthesized only for a plan whose
``training.adaptive`` is not ``off``; the workflow calls it after "Plan next segment" and
after "Plan run" (infra/workflow.py).

Its code is the planner (the same exact search and cost model as ``planner plan``), the
runtime's ``fasdl`` package (the run's records, the guards' clock), its handler
(replan/handler.py) and the profiles the plan was made with, staged into one folder at synth.
numpy, google-crc32c, boto3 and Powertools come from the torch layer's ``python/`` (its torch
archive is never unpacked here). It reads the run's records under the runs prefix and writes
only its decisions and the plans it changes to (``adaptations/``, ``plans/``;
infra.access.grant_replan, beside the other functions' grants). Outside the VPC,
like the trigger: it talks to S3 alone.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fasdl.contract.training import BUNDLED_PROFILES, CACHE_ECPU_MAX_ENV, MEASURED_ON_ENV
from infra import access
from infra.settings import FUNCTIONS_DIR, REPO_ROOT

REPLAN_ID = "Replan"
HANDLER = "replan.handler.handler"
# One vCPU: the search over W up to the ceiling, K and the batches is numpy on one core.
MEMORY_MB = 1_769
TIMEOUT = Duration.seconds(300)
LOG_RETENTION = logs.RetentionDays.ONE_MONTH
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "tests", ".*")


def stage_replan_code(profiles: Path) -> Path:
    """A folder holding ``planner/``, ``fasdl/``, ``replan/`` and ``profiles.json``."""
    staging = Path(tempfile.mkdtemp(prefix="fasdl-replan-"))
    for source in (REPO_ROOT / "planner", FUNCTIONS_DIR / "fasdl", REPO_ROOT / "replan"):
        shutil.copytree(source, staging / source.name, ignore=SKIPPED)
    shutil.copy2(profiles, staging / BUNDLED_PROFILES)
    return staging


class ReplanFunction(Construct):
    """The function, its role and log group, from what it needs: its staged code, the layer
    with its dependencies, the functions' common environment, the platform its measurements
    come from and (Valkey) the deployed cache's ECPU/s maximum."""

    def __init__(self, scope: Construct, construct_id: str, *, code_dir: Path,
                 layer: lambda_.ILayerVersion, architecture: lambda_.Architecture,
                 runtime: lambda_.Runtime, environment: dict[str, str], measured_on: str,
                 results: s3.IBucket, cache_ecpu_max: int | None = None) -> None:
        super().__init__(scope, construct_id)
        self.code_dir = code_dir
        self.role = access.build_role(self, "Role", "FasDL re-plan of an adaptive run")
        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION,
                                       removal_policy=RemovalPolicy.DESTROY)
        access.allow_logs(self.role, self.log_group)
        access.grant_replan(self.role, results=results)
        env = {**environment, MEASURED_ON_ENV: measured_on}
        if cache_ecpu_max is not None:
            env[CACHE_ECPU_MAX_ENV] = str(cache_ecpu_max)
        self.function = lambda_.Function(
            self, REPLAN_ID, runtime=runtime, handler=HANDLER,
            code=lambda_.Code.from_asset(str(code_dir)), layers=[layer],
            architecture=architecture, memory_size=MEMORY_MB, timeout=TIMEOUT,
            description="FasDL adaptive run: measure, re-plan the rest", role=self.role,
            log_group=self.log_group, environment=env)
