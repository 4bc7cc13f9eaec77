"""The README's data steps, as a user types them, against the local S3 server and the
trigger's own dataset check: the importer's layout, the upload commands and the keys the
trigger and workers read must agree (the digits variant, which needs no download)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from fasdl.contract.plan import Plan
from fasdl.datasets.__main__ import main as import_dataset
from fasdl.run import dataset_check
from infra.settings import DEFAULT_PLAN_PATH, REPO_ROOT
from local.servers.managed import SeaweedS3Server

BUCKET = "datasets-readme"
SYNC = re.compile(r"^aws s3 sync (?P<src>\S+) s3://<DatasetsBucketName>/(?P<prefix>\S+)$")


def _readme_steps() -> tuple[list[str], list[tuple[str, str]]]:
    """The importer command and the sync commands of README step 5, cifar10 -> digits (the
    README's other importer line, `digits data/digits` under "Plan a job", is run by
    tests/integration/test_readme_commands.py)."""
    lines = [line.strip() for line in (REPO_ROOT / "README.md").read_text().splitlines()]
    (importer,) = [line for line in lines
                   if line.startswith(".venv/bin/python -m fasdl.datasets cifar10 ")]
    syncs = [SYNC.match(line) for line in lines if line.startswith("aws s3 sync data/")]
    assert syncs and all(syncs), "README step 5 must upload with `aws s3 sync`"
    return (shlex.split(importer.split("#")[0]),
            [(m["src"], m["prefix"]) for m in syncs if m is not None])


def test_readme_data_steps_pass_the_triggers_check(seaweed_server: SeaweedS3Server,
                                                    tmp_path: Path) -> None:
    command, syncs = _readme_steps()
    assert command[3:5] == ["cifar10", "cifar-10-binary.tar.gz"]
    out = tmp_path / "data" / "digits"
    assert import_dataset(["digits", str(out)]) == 0  # README: "# or: digits data/digits"
    seaweed_server.create_bucket(BUCKET)
    client = seaweed_server.client()
    for source, prefix in syncs:  # what `aws s3 sync` uploads: every file under source
        local = tmp_path / source.replace("cifar10", "digits")
        for path in sorted(local.rglob("*")):
            if path.is_file():
                key = prefix.replace("cifar10", "digits") + path.relative_to(local).as_posix()
                client.upload_file(str(path), BUCKET, key)
    plan = Plan.load(DEFAULT_PLAN_PATH)  # cnn-digits on datasets/digits, 1438 samples
    checked = dataset_check.check_dataset(plan, dataset_check.s3_ranges(client, BUCKET),
                                          dataset_check.s3_sizes(client, BUCKET))
    assert checked.workload.samples == plan.workload.samples
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert keys == {"datasets/digits/x.npy", "datasets/digits/y.npy",
                    "datasets/digits/meta.json",  # the importer's description, read by no worker
                    "datasets/digits/test/x.npy", "datasets/digits/test/y.npy"}
